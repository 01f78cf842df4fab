// Planning and loading a model onto devices (see placement.h).
#include "model/runtime/placement.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <unordered_map>

#include "core/format.h"
#include "model/gguf/gguf_tensors.h"
#include "tensorpc/scheduler.h"

namespace tensorpc {
namespace {

uint64_t aligned(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// A device's weights go up in batches of about this many bytes, one
// Buffer::set_tensors each, with progress reported between them: at 1 Gbit/s
// a cold batch takes half a second, so the bar moves, and a warm one is
// large enough for a remote buffer to overlap its hashing with the server's
// work (remote_buffer_cache.cpp).
constexpr uint64_t kUploadBatch = uint64_t{64} << 20;

// The bytes of `tensors` in the model file's mapping, each with its digest's
// slot in the model's memo (a remote buffer uses the known ones and fills in
// the rest). Made before any upload starts: the memo's slots are then only
// written, each by the one upload that holds it.
StatusOr<std::vector<TensorBytes>> file_bytes(const LlamaModel& model, const std::vector<Tensor*>& tensors) {
  std::vector<TensorBytes> out;
  for (const Tensor* t : tensors) {
    const GgufTensorInfo* info = model.info_of(t);
    if (info == nullptr) return internal_error("placement: no file record for " + describe(*t));
    TENSORPC_ASSIGN_OR_RETURN(const TensorBytes bytes, gguf_tensor_bytes(*info, *t));
    out.push_back(bytes);
    out.back().digest = &model.digests().slot(model.file().data_offset() + info->offset, info->bytes.size());
  }
  return out;
}

// Uploads `tensors` (placed in `buffer`) in batches; `uploaded` is told each
// batch's bytes (aligned, as the buffer holds them).
Status upload_weights(Buffer& buffer, std::span<const TensorBytes> tensors, uint64_t alignment,
                      const std::function<void(uint64_t)>& uploaded) {
  size_t first = 0;
  uint64_t batch_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    batch_bytes += aligned(tensors[i].tensor->nbytes(), alignment);
    if (batch_bytes >= kUploadBatch || i + 1 == tensors.size()) {
      TENSORPC_RETURN_IF_ERROR(buffer.set_tensors(tensors.subspan(first, i + 1 - first)));
      uploaded(batch_bytes);
      first = i + 1;
      batch_bytes = 0;
    }
  }
  // Uploads are one-way to a server: a load is done when they have landed
  // (and are in its weights cache for the next load), or failed here.
  return buffer.synchronize();
}

// The devices whose uploads go one after the other: a server's (its
// devices share the connection and the server's memory bandwidth), or the
// local ones. Different servers' uploads run at once.
std::string upload_group(const Device& device) {
  const std::string name = device.name();
  const size_t slash = name.find('/');
  return slash == std::string::npos ? std::string() : name.substr(0, slash);
}

// Whether `device` computes the writes of one token into a layer's cache as
// the graph builder makes them (keys as rows, values as a column of the
// transposed cache).
bool writes_cache(const Device& device, DType cache_type, int64_t kv_dim, int64_t n_ctx) {
  Context ctx;
  Tensor* k_cache = ctx.new_tensor(cache_type, {kv_dim, n_ctx});
  Tensor* v_cache = ctx.new_tensor(cache_type, {n_ctx, kv_dim});
  Tensor* cells = ctx.new_tensor(DType::i32, {1});
  Tensor* k = ctx.new_tensor(DType::f32, {kv_dim, 1});
  Tensor* v = ctx.new_tensor(DType::f32, {kv_dim, 1});
  return device.supports(*ctx.set_rows(k_cache, k, cells)) &&
         device.supports(*ctx.set_rows(ctx.transpose(v_cache), v, cells));
}

// The device `o` names: the one device of that name.
StatusOr<size_t> device_named(const std::vector<Device*>& devices, const PlacementOverride& o) {
  std::vector<size_t> found;
  std::string names;
  for (size_t d = 0; d < devices.size(); ++d) {
    if (devices[d]->name() == o.device) found.push_back(d);
    names += (d == 0 ? "" : ", ") + devices[d]->name();
  }
  const std::string quoted = "tensor override '" + o.pattern + "=" + o.device + "'";
  if (found.empty()) return not_found(quoted + ": no device is named '" + o.device + "' (the devices: " + names + ")");
  if (found.size() > 1) {
    return invalid_argument(quoted + ": " + std::to_string(found.size()) + " devices are named '" + o.device +
                            "' (the devices: " + names + ")");
  }
  return found.front();
}

// Where the overrides put weights: each overridden weight's device, and what
// each override took (its bytes aligned as its device holds them).
struct OverridePlan {
  std::unordered_map<const Tensor*, size_t> device;
  std::vector<ModelPlacement::OverrideUse> uses;
  std::vector<uint64_t> device_bytes;  // per device
};

StatusOr<OverridePlan> plan_overrides(const LlamaModel& model, const std::vector<Device*>& devices,
                                      const std::vector<PlacementOverride>& overrides) {
  OverridePlan plan;
  plan.device_bytes.assign(devices.size(), 0);
  if (overrides.empty()) return plan;
  std::vector<std::regex> patterns;
  for (const PlacementOverride& o : overrides) {
    TENSORPC_ASSIGN_OR_RETURN(std::regex re, override_regex(o.pattern));
    patterns.push_back(std::move(re));
    TENSORPC_ASSIGN_OR_RETURN(const size_t d, device_named(devices, o));
    plan.uses.push_back({.override = o, .device = d});
  }
  const LlamaWeights& w = model.weights();
  std::vector<const Tensor*> all = {w.tok_embd, w.rope_freqs, w.output_norm, w.output};
  for (const LlamaLayerWeights& layer : w.layers) {
    for (const Tensor* t : layer.tensors()) all.push_back(t);
  }
  std::vector<bool> matched(overrides.size(), false);
  for (const Tensor* t : all) {
    const GgufTensorInfo* info = t != nullptr ? model.info_of(t) : nullptr;
    if (info == nullptr || plan.device.contains(t)) continue;  // absent (rope_freqs), or tied and seen
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (!std::regex_search(info->name, patterns[i])) continue;
      matched[i] = true;
      if (plan.device.contains(t)) continue;  // an earlier override has it
      ModelPlacement::OverrideUse& use = plan.uses[i];
      plan.device.emplace(t, use.device);
      ++use.tensors;
      use.bytes += aligned(t->nbytes(), devices[use.device]->alignment());
      plan.device_bytes[use.device] += aligned(t->nbytes(), devices[use.device]->alignment());
    }
  }
  for (size_t i = 0; i < overrides.size(); ++i) {
    if (!matched[i]) {
      return not_found("tensor override '" + overrides[i].pattern + "=" + overrides[i].device +
                       "': the pattern matches no tensor of " + model.name());
    }
  }
  return plan;
}

}  // namespace

StatusOr<std::regex> override_regex(const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return invalid_argument("tensor override pattern '" + pattern + "' is not a regular expression: " + e.what());
  }
}

std::vector<int64_t> layers_per_device(int64_t n_layer, const std::vector<double>& weights) {
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> count(weights.size(), 0);
  if (weights.empty() || !(total > 0)) return count;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(n_layer) * weights[i] / total;
    count[i] = static_cast<int64_t>(std::floor(exact));
    given += count[i];
    remainders.push_back({exact - std::floor(exact), i});
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < n_layer; ++k, ++given) ++count[remainders[k % remainders.size()].second];
  return count;
}

std::vector<int64_t> layers_by_room(int64_t n_layer, const std::vector<LayerRoom>& rooms, uint64_t layer_bytes) {
  std::vector<double> room(rooms.size()), gpu_fit(rooms.size()), cpu_room(rooms.size());
  double gpu_layers = 0, cpu_total = 0;
  for (size_t d = 0; d < rooms.size(); ++d) {
    room[d] = static_cast<double>(rooms[d].bytes);
    if (rooms[d].gpu) {
      const uint64_t usable = rooms[d].bytes > rooms[d].keep ? rooms[d].bytes - rooms[d].keep : 0;
      gpu_fit[d] = static_cast<double>(usable / std::max<uint64_t>(layer_bytes, 1));
      gpu_layers += gpu_fit[d];
    } else {
      cpu_room[d] = room[d];
      cpu_total += room[d];
    }
  }
  if (!(gpu_layers > 0) || !(cpu_total > 0)) return layers_per_device(n_layer, room);
  // Each GPU's share is at most what fits in it: the largest remainder rounds
  // a share up only past its exact part, which is at most its fit.
  const auto on_gpus = static_cast<int64_t>(std::min(static_cast<double>(n_layer), gpu_layers));
  std::vector<int64_t> count = layers_per_device(on_gpus, gpu_fit);
  const std::vector<int64_t> rest = layers_per_device(n_layer - on_gpus, cpu_room);
  for (size_t d = 0; d < count.size(); ++d) count[d] += rest[d];
  return count;
}

StatusOr<std::unique_ptr<ModelPlacement>> ModelPlacement::create(const LlamaModel& model, std::vector<Device*> devices,
                                                                 PlacementOptions options) {
  const LlamaHparams& hp = model.hparams();
  const LlamaWeights& w = model.weights();
  if (devices.empty()) return invalid_argument("placement: no devices");
  std::unique_ptr<ModelPlacement> p(new ModelPlacement());
  p->devices_ = devices;
  const size_t nd = devices.size();
  TENSORPC_ASSIGN_OR_RETURN(OverridePlan overridden, plan_overrides(model, devices, options.overrides));

  // How many layers each device takes: by explicit ratios, else by free
  // memory, what each device has left after the overrides (GPUs first where
  // they are mixed with CPUs).
  const int64_t n_ctx = context_positions(hp, options.n_ctx);
  std::vector<int64_t> counts;
  if (options.ratios.empty()) {
    std::vector<LayerRoom> rooms;
    for (size_t d = 0; d < nd; ++d) {
      auto memory = devices[d]->memory();
      if (!memory.ok())
        return Status(memory.status().code(),
                      "placement: free memory of " + devices[d]->name() + ": " + memory.status().message());
      const uint64_t free = memory.value().free, taken = overridden.device_bytes[d];
      const bool none = options.last_takes_no_layers && d + 1 == nd;
      rooms.push_back({none || taken >= free ? 0 : free - taken, devices[d]->processor() == DeviceKind::gpu});
    }
    // Mixed with CPUs, a GPU keeps back room for the embedding, the output
    // projection and the activations (a sixteenth of its room); a layer is
    // the largest layer's weights and a layer's KV cache.
    const uint64_t ends = w.tok_embd->nbytes() + (w.output != w.tok_embd ? w.output->nbytes() : 0);
    for (LayerRoom& r : rooms) r.keep = ends + r.bytes / 16;
    const uint64_t cache_bytes = 2 * row_bytes(options.cache_type, hp.kv_dim() * n_ctx);
    uint64_t largest = 0;
    for (const auto& layer : w.layers) {
      uint64_t bytes = 0;
      for (const Tensor* t : layer.tensors()) bytes += t->nbytes();
      largest = std::max(largest, bytes);
    }
    counts = layers_by_room(hp.n_layer, rooms, cache_bytes + largest);
  } else {
    if (options.ratios.size() != nd) {
      return invalid_argument("placement: " + std::to_string(options.ratios.size()) + " split ratios for " +
                              std::to_string(nd) + " devices");
    }
    for (double r : options.ratios) {
      if (!(r >= 0) || !std::isfinite(r)) return invalid_argument("placement: split ratios must be finite and ≥ 0");
    }
    counts = layers_per_device(hp.n_layer, options.ratios);
  }
  if (std::accumulate(counts.begin(), counts.end(), int64_t{0}) != hp.n_layer) {
    return invalid_argument("placement: every split ratio is 0, or no device reports free memory");
  }
  for (size_t d = 0; d < nd; ++d) {
    for (int64_t i = 0; i < counts[d]; ++i) p->layer_device_.push_back(d);
  }

  // KV cache descriptors per layer: keys [kv_dim, n_ctx], values transposed.
  p->cache_.n_ctx = n_ctx;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    p->cache_.k.push_back(
        p->cache_ctx_.new_tensor(options.cache_type, {hp.kv_dim(), n_ctx}, "cache_k." + std::to_string(l)));
    p->cache_.v.push_back(
        p->cache_ctx_.new_tensor(options.cache_type, {n_ctx, hp.kv_dim()}, "cache_v." + std::to_string(l)));
  }

  // Each layer's cache lives on its device when that device writes the
  // cache (the set_rows of the graph builder), else on the first device that
  // does, of the same server (or this process) if one does, else a local
  // CPU: a GPU without that op keeps its layers' weights, and the scheduler
  // runs the attention next to the cache.
  std::vector<size_t> cache_device(nd);
  std::vector<bool> writes(nd);
  for (size_t d = 0; d < nd; ++d) writes[d] = writes_cache(*devices[d], options.cache_type, hp.kv_dim(), n_ctx);
  for (size_t d = 0; d < nd; ++d) {
    cache_device[d] = d;
    if (writes[d]) continue;
    const auto first = [&](const std::function<bool(size_t)>& fits) {
      for (size_t c = 0; c < nd; ++c) {
        if (writes[c] && fits(c)) return c;
      }
      return d;
    };
    const ExecutorId here = ExecutorId::of(*devices[d]);
    cache_device[d] = first([&](size_t c) { return ExecutorId::of(*devices[c]) == here; });
    if (cache_device[d] == d) cache_device[d] = first([&](size_t c) { return devices[c]->kind() == DeviceKind::cpu; });
  }

  // What lives where: a weight on its override's device, else with its layer.
  std::vector<std::vector<Tensor*>> weights(nd), caches(nd);
  const auto put = [&](Tensor* t, size_t d) {
    const auto it = overridden.device.find(t);
    weights[it == overridden.device.end() ? d : it->second].push_back(t);
  };
  // rope_freqs (a few hundred bytes) lives with the embedding; layers on
  // other devices get it through the scheduler's copies.
  put(w.tok_embd, p->layer_device_.front());
  if (w.rope_freqs != nullptr) put(w.rope_freqs, p->layer_device_.front());
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const size_t d = p->layer_device_[static_cast<size_t>(l)];
    for (Tensor* t : w.layers[static_cast<size_t>(l)].tensors()) put(t, d);
    caches[cache_device[d]].push_back(p->cache_.k[static_cast<size_t>(l)]);
    caches[cache_device[d]].push_back(p->cache_.v[static_cast<size_t>(l)]);
  }
  const size_t last = p->layer_device_.back();
  put(w.output_norm, last);
  if (w.output != w.tok_embd) put(w.output, last);
  if (w.output == w.tok_embd && last != p->layer_device_.front() && !overridden.device.contains(w.tok_embd)) {
    return unsupported("placement: tied embeddings need the first and last layers on one device");
  }
  p->overrides_ = std::move(overridden.uses);

  // Room first, then buffers: nothing is allocated unless everything fits.
  // What the overrides put on a device first: that is theirs to fix.
  for (size_t d = 0; d < nd; ++d) {
    const uint64_t taken = overridden.device_bytes[d];
    auto memory = taken > 0 ? devices[d]->memory() : StatusOr<MemoryInfo>(MemoryInfo{});
    if (memory.ok() && taken > memory.value().free) {
      return out_of_memory("placement: tensor overrides put " + format_bytes(taken) + " of weights on " +
                           devices[d]->name() + ", which has " + format_bytes(memory.value().free) + " free");
    }
  }
  p->device_weights_.assign(nd, 0);
  p->device_cache_.assign(nd, 0);
  for (size_t d = 0; d < nd; ++d) {
    const uint64_t a = devices[d]->alignment();
    for (Tensor* t : weights[d]) p->device_weights_[d] += aligned(t->nbytes(), a);
    for (Tensor* t : caches[d]) p->device_cache_[d] += aligned(t->nbytes(), a);
    const uint64_t need = p->device_weights_[d] + p->device_cache_[d];
    auto memory = devices[d]->memory();
    if (!memory.ok()) {
      return Status(memory.status().code(),
                    "placement: free memory of " + devices[d]->name() + ": " + memory.status().message());
    }
    const uint64_t free = memory.value().free, taken = overridden.device_bytes[d];
    if (need > free) {
      const std::string with = taken > 0 ? " and the " + format_bytes(taken) + " tensor overrides put there" : "";
      return out_of_memory("placement: " + devices[d]->name() + " needs " + format_bytes(need) + " for its " +
                           std::to_string(counts[d]) + " layers" + with + ", and has " + format_bytes(free) + " free");
    }
  }
  p->weight_buffers_.resize(nd);
  p->cache_buffers_.resize(nd);
  const size_t digests_known = model.digests().known();
  uint64_t total = 0, done = 0;
  for (uint64_t b : p->device_weights_) total += b;
  std::vector<std::vector<TensorBytes>> uploads(nd);
  for (size_t d = 0; d < nd; ++d) {
    const uint64_t a = devices[d]->alignment();
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<Tensor*>& list = kind == 0 ? weights[d] : caches[d];
      const uint64_t bytes = kind == 0 ? p->device_weights_[d] : p->device_cache_[d];
      if (list.empty()) continue;
      auto buffer = devices[d]->allocate(bytes);
      if (!buffer.ok()) return buffer.status().with_context("placement");
      uint64_t offset = 0;
      for (Tensor* t : list) {
        TENSORPC_RETURN_IF_ERROR(buffer.value()->place(*t, offset));
        offset += aligned(t->nbytes(), a);
      }
      (kind == 0 ? p->weight_buffers_ : p->cache_buffers_)[d] = std::move(buffer).value();
    }
    if (p->cache_buffers_[d]) TENSORPC_RETURN_IF_ERROR(p->cache_buffers_[d]->clear(0));
    TENSORPC_ASSIGN_OR_RETURN(uploads[d], file_bytes(model, weights[d]));  // once the tensors are placed
  }
  // Each group's devices in turn, the groups at once; the progress calls one at a time.
  std::map<std::string, std::vector<size_t>> groups;
  for (size_t d = 0; d < nd; ++d) {
    if (!uploads[d].empty()) groups[upload_group(*devices[d])].push_back(d);
  }
  std::mutex progress_mutex;
  const auto upload_group_devices = [&](const std::vector<size_t>& group) -> Status {
    for (size_t d : group) {
      const auto uploaded = [&](uint64_t bytes) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        done += bytes;
        if (options.progress) options.progress(done, total, devices[d]->name());
      };
      TENSORPC_RETURN_IF_ERROR(upload_weights(*p->weight_buffers_[d], uploads[d], devices[d]->alignment(), uploaded)
                                   .with_context("placement on " + devices[d]->name()));
    }
    return Status();
  };
  std::vector<std::future<Status>> running;
  for (auto it = std::next(groups.begin(), groups.empty() ? 0 : 1); it != groups.end(); ++it) {
    running.push_back(std::async(std::launch::async, upload_group_devices, std::cref(it->second)));
  }
  Status failed = groups.empty() ? Status() : upload_group_devices(groups.begin()->second);
  for (std::future<Status>& r : running) {
    const Status s = r.get();
    if (failed.ok()) failed = s;
  }
  TENSORPC_RETURN_IF_ERROR(failed);
  // The digests remote buffers computed, for the next load of this file. Not
  // saving them costs that load the hashing, nothing more: the failure stays
  // in WeightDigests::save_failure() for whoever reports to a person.
  if (model.digests().known() > digests_known) (void)model.digests().save();
  return p;
}

Status ModelPlacement::clear_cache() {
  for (auto& b : cache_buffers_) {
    if (b) TENSORPC_RETURN_IF_ERROR(b->clear(0));
  }
  return Status();
}

uint64_t ModelPlacement::weight_bytes() const {
  return std::accumulate(device_weights_.begin(), device_weights_.end(), uint64_t{0});
}

std::string ModelPlacement::table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-32s %-10s %12s %12s\n", "device", "layers", "weights", "KV cache");
  out += line;
  for (size_t d = 0; d < devices_.size(); ++d) {
    int64_t first = -1, last = -1;
    for (size_t l = 0; l < layer_device_.size(); ++l) {
      if (layer_device_[l] != d) continue;
      if (first < 0) first = static_cast<int64_t>(l);
      last = static_cast<int64_t>(l);
    }
    const std::string layers = first < 0 ? "-" : std::to_string(first) + "-" + std::to_string(last);
    std::snprintf(line, sizeof line, "%-32s %-10s %12s %12s\n", devices_[d]->name().c_str(), layers.c_str(),
                  format_bytes(device_weights_[d]).c_str(), format_bytes(device_cache_[d]).c_str());
    out += line;
  }
  if (overrides_.empty()) return out;
  // Patterns and device names as long as they come: no fixed-width buffer.
  const auto pad = [](std::string s, size_t width) {
    s.resize(std::max(s.size(), width), ' ');
    return s;
  };
  out += pad("override", 32) + " " + pad("device", 32) + "  tensors      weights\n";
  for (const OverrideUse& u : overrides_) {
    std::snprintf(line, sizeof line, "%9zu %12s\n", u.tensors, format_bytes(u.bytes).c_str());
    out += pad(u.override.pattern, 32) + " " + pad(devices_[u.device]->name(), 32) + line;
  }
  return out;
}

int64_t context_positions(const LlamaHparams& hp, int64_t requested) {
  if (requested > 0) return requested;
  const int64_t n_ctx = std::min<int64_t>(hp.n_ctx_train, 2048);
  return n_ctx > 0 ? n_ctx : 2048;
}

}  // namespace tensorpc
