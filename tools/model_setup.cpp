// Opening a model for a command, and the flags that say where (model_setup.h).
#include "model_setup.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "api/model_internals.h"
#include "cli_checks.h"
#include "core/format.h"
#include "device_spec.h"
#include "model/runtime/placement.h"

namespace tensorpc::tools {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

UploadProgress::UploadProgress(std::FILE* err)
    : err_(err), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

std::function<void(uint64_t, uint64_t, const std::string&)> UploadProgress::callback() {
  return [this](uint64_t done, uint64_t total, const std::string& device) { draw(done, total, device); };
}

void UploadProgress::draw(uint64_t done, uint64_t total, const std::string& device) {
  const auto now = std::chrono::steady_clock::now();
  // The calls come one at a time: the bytes since the last one are this device's.
  const size_t slash = device.find('/');
  shares_[slash == std::string::npos ? "local" : device.substr(0, slash)] += done - std::min(done, last_done_);
  last_done_ = done;
  // At most ten updates a second: a terminal redraw per tensor would cost more than small uploads.
  if (err_ == nullptr || (done != total && seconds_between(last_draw_, now) < 0.1)) return;
  last_draw_ = now;
  drawn_ = true;
  const double secs = std::max(seconds_between(start_, now), 1e-9);
  std::string where = device;
  if (shares_.size() > 1) {
    where.clear();
    for (const auto& [server, bytes] : shares_) {
      where += (where.empty() ? "" : ", ") + server + " " + format_bytes(static_cast<double>(bytes)) + " at " +
               format_bytes(static_cast<double>(bytes) / secs) + "/s";
    }
  }
  std::fprintf(err_, "\rloading weights: %s / %s (%3.0f%%), %s/s, %-28s",
               format_bytes(static_cast<double>(done)).c_str(), format_bytes(static_cast<double>(total)).c_str(),
               total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
               format_bytes(static_cast<double>(done) / secs).c_str(), where.c_str());
  std::fflush(err_);
}

void UploadProgress::end() {
  if (drawn_) std::fprintf(err_, "\n");
  drawn_ = false;
}

StatusOr<ModelOptions> model_options(const ModelSetup& setup) {
  ModelOptions o;
  o.path = setup.model;
  o.servers = setup.endpoints;
  TENSORPC_ASSIGN_OR_RETURN(o.remote, remote_options(setup.client));
  o.use_local_cpu = setup.use_local;
  o.local_devices = setup.local_devices;
  o.threads = setup.threads;
  o.split = setup.split;
  o.context_size = setup.n_ctx;
  o.tensor_overrides = setup.tensor_overrides;
  o.recovery.enabled = setup.recover;
  o.recovery.reconnect_wait_s = setup.reconnect_wait_s;
  o.recovery.standby = setup.standby;
  o.draft_path = setup.draft_model;
  o.draft_device = setup.draft_device;
  return o;
}

StatusOr<Model> open_model(const ModelSetup& setup, std::FILE* err) {
  TENSORPC_ASSIGN_OR_RETURN(auto model, LlamaModel::open(setup.model));  // its message names the file once
  return open_model(std::move(model), setup, err);
}

StatusOr<Model> open_model(std::unique_ptr<LlamaModel> model, const ModelSetup& setup, std::FILE* err) {
  TENSORPC_ASSIGN_OR_RETURN(ModelOptions options, model_options(setup));
  options.on_open = [&](const ModelInfo& m) {
    const std::string experts =
        m.experts > 0 ? ", " + std::to_string(m.experts) + " experts (" + std::to_string(m.experts_used) + " a token)"
                      : "";
    std::fprintf(err, "model %s: %lld layers, %lld embd, %lld heads (%lld kv)%s, vocab %lld, %.1f M parameters\n",
                 setup.model.c_str(), static_cast<long long>(m.layers), static_cast<long long>(m.embedding_size),
                 static_cast<long long>(m.heads), static_cast<long long>(m.kv_heads), experts.c_str(),
                 static_cast<long long>(m.vocabulary_size), static_cast<double>(m.parameters) / 1e6);
    const int64_t per_sequence = setup.n_ctx / std::max<int64_t>(setup.n_seq, 1);
    if (m.trained_context > 0 && per_sequence > m.trained_context) {
      std::fprintf(err,
                   "warning: a context of %lld positions is beyond the %lld the model was trained for; "
                   "text past %lld may degrade\n",
                   static_cast<long long>(per_sequence), static_cast<long long>(m.trained_context),
                   static_cast<long long>(m.trained_context));
    }
    return Status();
  };
  UploadProgress bar(err);
  options.on_progress = bar.callback();
  options.recovery.on_event = [err](const std::string& line) {
    std::fprintf(err, "recovery: %s\n", line.c_str());
    std::fflush(err);
  };
  auto opened = ModelInternals::open(std::move(model), options);
  bar.end();
  if (!opened.ok()) return opened.status();
  const ModelInfo info = opened.value().info();
  if (!info.warning.empty()) std::fprintf(err, "warning: %s\n", info.warning.c_str());
  if (info.server_weight_bytes > 0) {
    const uint64_t sent = info.server_bytes_sent, weights = info.server_weight_bytes;
    const double spared = weights > sent ? static_cast<double>(weights - sent) : 0.0;
    std::fprintf(err, "sent %s to the servers for %s of weights on them: their weights caches spared %s (%.0f%%)\n",
                 format_bytes(static_cast<double>(sent)).c_str(), format_bytes(static_cast<double>(weights)).c_str(),
                 format_bytes(spared).c_str(), 100.0 * spared / static_cast<double>(weights));
  }
  std::fprintf(err, "%s", info.placement.c_str());
  if (!info.draft.empty()) std::fprintf(err, "draft model %s\n", info.draft.c_str());
  return opened;
}

StatusOr<std::vector<double>> parse_split(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("--split '" + std::string(text) + "': " + why + " (expected ratios such as 1,1,2)");
  };
  std::vector<double> out;
  double total = 0;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      return bad("'" + item + "' is not a number");
    }
    if (used != item.size()) return bad("'" + item + "' is not a number");
    if (!std::isfinite(v) || v < 0) return bad("ratios must be finite and ≥ 0");
    out.push_back(v);
    total += v;
    start = comma + 1;
  }
  if (!(total > 0)) return bad("at least one ratio must be positive");
  return out;
}

StatusOr<TensorOverride> parse_tensor_override(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument("--override-tensor '" + std::string(text) + "': " + why +
                            " (expected REGEX=DEVICE, such as exps=cpu)");
  };
  const size_t eq = text.rfind('=');
  if (eq == std::string_view::npos) return bad("no '='");
  TensorOverride o{.pattern = std::string(text.substr(0, eq)), .device = std::string(text.substr(eq + 1))};
  if (o.pattern.empty()) return bad("empty REGEX");
  if (o.device.empty()) return bad("empty DEVICE");
  if (auto re = override_regex(o.pattern); !re.ok()) {
    return invalid_argument("--override-tensor '" + std::string(text) + "': " + re.status().message());
  }
  return o;
}

StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read " + path);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return io_error("cannot read " + path);
  return text;
}

std::shared_ptr<ModelSetupFlags> ModelSetupFlags::add_to(CLI::App& cmd) {
  auto f = std::make_shared<ModelSetupFlags>();
  auto* rpc = cmd.add_option("--rpc", f->rpc_, "servers whose devices to use, host:port[,host:port…] (repeatable)");
  add_client_flags(cmd, f->client_);
  cmd.add_option("--split", f->split_,
                 "layers per device in proportion, one ratio per device in order (default: by free memory)")
      ->check([](const std::string& s) {
        auto r = parse_split(s);
        return r.ok() ? std::string() : r.status().message();
      });
  cmd.add_option("--override-tensor", f->overrides_,
                 "REGEX=DEVICE (also -ot; repeatable, the first match wins): the weights whose GGUF name "
                 "(blk.3.ffn_up.weight) REGEX is found in go to DEVICE, named as the placement table names it "
                 "(cpu, vulkan:0, HOST:PORT/cpu0); the rest goes with its layers")
      ->check([](const std::string& s) {
        auto r = parse_tensor_override(s);
        return r.ok() ? std::string() : r.status().message();
      });
  cmd.add_option("-t,--threads", f->threads_, "threads of the local CPU (0: every core)")
      ->check(check_thread_count)
      ->capture_default_str();
  auto* device = cmd.add_option("--device", f->devices_,
                                "the local devices to use, comma-separated, in order: cpu, vulkan (every Vulkan "
                                "device) or vulkan:N; with GPUs and no cpu, the local CPU still runs what they "
                                "do not compute")
                     ->check([](const std::string& list) {
                       for (const std::string& name : split_endpoints({list})) {
                         if (name != "cpu" && name != "vulkan" && name.rfind("vulkan:", 0) != 0) {
                           return "unknown local device '" + name + "': expected cpu, vulkan or vulkan:N";
                         }
                       }
                       return split_endpoints({list}).empty() ? std::string("no device named") : std::string();
                     })
                     ->capture_default_str();
  cmd.add_flag("--no-recover", f->no_recover_,
               "a lost server ends the work with its error, instead of loading its layers again (on it when it "
               "comes back, on a standby, or on the devices left) and going on");
  cmd.add_option("--reconnect-wait", f->reconnect_wait_s_,
                 "seconds to wait for a lost server to answer again before its layers go elsewhere")
      ->check(finite_number("a number of seconds from 0 to 1000000", [](double x) { return x >= 0 && x <= 1e6; }))
      ->capture_default_str();
  cmd.add_option("--standby", f->standby_,
                 "servers, host:port[,host:port…] (repeatable), checked at start and holding no layers: a lost "
                 "server's layers go to the first that answers");
  auto* local_only = cmd.add_flag("--local-only", f->local_only_, "use the local devices only");
  local_only->excludes(rpc);
  cmd.add_flag("--no-local", f->no_local_, "use only the servers' devices, not the local ones")
      ->needs(rpc)
      ->excludes(local_only)
      ->excludes(device);
  return f;
}

void ModelSetupFlags::apply(ModelSetup& setup) const {
  setup.endpoints = split_endpoints(rpc_);
  setup.split = split_.empty() ? std::vector<double>{} : parse_split(split_).value();  // checked by the option
  setup.tensor_overrides.clear();
  for (const std::string& s : overrides_)
    setup.tensor_overrides.push_back(parse_tensor_override(s).value());  // checked
  setup.client = client_;
  setup.threads = threads_;
  setup.use_local = !no_local_;
  setup.local_devices = split_endpoints({devices_});  // comma-separated, as --rpc
  setup.recover = !no_recover_;
  setup.reconnect_wait_s = reconnect_wait_s_;
  setup.standby = split_endpoints(standby_);
}

}  // namespace tensorpc::tools
