// The shared parts of `tensorpc run` and `tensorpc demo` (generation.h).
#include "tensorpc/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "tensorpc/rpc_client.h"

namespace tensorpc::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t bytes_sent_to(const std::vector<std::string>& endpoints) {
  uint64_t sum = 0;
  for (const std::string& e : endpoints) sum += connection_stats(e).bytes_sent;
  return sum;
}

}  // namespace

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

StatusOr<std::unique_ptr<ModelPlacement>> load_model(const LlamaModel& model, const std::vector<Device*>& devices,
                                                     const std::vector<std::string>& endpoints,
                                                     std::vector<double> ratios, int64_t n_ctx, std::FILE* err) {
  // Weight bytes each remote device took, from the progress calls: the
  // baseline against which the bytes actually sent show the cache's saving.
  std::map<std::string, bool> is_remote;
  for (Device* d : devices) is_remote[d->name()] = d->kind() == DeviceKind::remote;
  uint64_t remote_weights = 0, last_done = 0;
  const uint64_t sent_before = bytes_sent_to(endpoints);
  const Clock::time_point start = Clock::now();
  Clock::time_point last_print = start;

  PlacementOptions options;
  options.ratios = std::move(ratios);
  options.n_ctx = n_ctx;
  options.progress = [&](uint64_t done, uint64_t total, const std::string& device) {
    if (is_remote[device]) remote_weights += done - last_done;
    last_done = done;
    // At most ten updates a second: a terminal redraw per tensor would cost more than small uploads.
    if (err == nullptr || (done != total && seconds_since(last_print) < 0.1)) return;
    last_print = Clock::now();
    const double secs = std::max(seconds_since(start), 1e-9);
    std::fprintf(err, "\rloading weights: %s / %s (%3.0f%%), %s/s, %-28s",
                 format_bytes(static_cast<double>(done)).c_str(), format_bytes(static_cast<double>(total)).c_str(),
                 total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 format_bytes(static_cast<double>(done) / secs).c_str(), device.c_str());
    std::fflush(err);
  };
  auto placement = ModelPlacement::create(model, devices, options);
  if (err != nullptr && last_done > 0) std::fprintf(err, "\n");
  if (!placement.ok()) return placement.status();
  if (const Status& s = model.digests().save_failure(); err != nullptr && !s.ok()) {
    std::fprintf(err, "warning: %s (the next load hashes the weights again)\n", s.to_string().c_str());
  }
  if (err != nullptr && remote_weights > 0) {
    // Bytes sent include frame headers and the hashes the cache protocol sends first.
    const uint64_t sent = bytes_sent_to(endpoints) - sent_before;
    const double spared = remote_weights > sent ? static_cast<double>(remote_weights - sent) : 0.0;
    std::fprintf(err, "sent %s to the servers for %s of weights on them: their weights caches spared %s (%.0f%%)\n",
                 format_bytes(static_cast<double>(sent)).c_str(),
                 format_bytes(static_cast<double>(remote_weights)).c_str(), format_bytes(spared).c_str(),
                 100.0 * spared / static_cast<double>(remote_weights));
  }
  return placement;
}

StatusOr<GenerateResult> generate(const LlamaModel& model, ModelPlacement& placement, std::string_view prompt,
                                  const GenerateOptions& options,
                                  const std::function<void(std::string_view)>& on_text) {
  Generator gen(model, placement, options.generator);
  return generate(gen, prompt, options, on_text);
}

StatusOr<GenerateResult> generate(Generator& gen, std::string_view prompt, const GenerateOptions& options,
                                  const std::function<void(std::string_view)>& on_text) {
  return generate_text(gen, prompt, options, [&on_text](std::string_view piece, int32_t) {
    if (on_text && !piece.empty()) on_text(piece);
    return true;
  });
}

void print_speed(const GenerateResult& r, std::FILE* out) {
  const double prompt_tps = r.prompt_seconds > 0 ? static_cast<double>(r.prompt.size()) / r.prompt_seconds : 0;
  const double gen_tps = r.decode_seconds > 0 ? r.decode_steps / r.decode_seconds : 0;
  std::fprintf(out, "prompt: %zu tokens in %.3f s (%.1f tokens/s)\n", r.prompt.size(), r.prompt_seconds, prompt_tps);
  std::fprintf(out, "generation: %zu tokens, %d decode steps in %.3f s (%.1f tokens/s)\n", r.generated.size(),
               r.decode_steps, r.decode_seconds, gen_tps);
  if (r.decode_steps > 0 && r.decode.bytes_sent + r.decode.bytes_received > 0) {
    const double steps = r.decode_steps;
    std::fprintf(out, "client traffic per generated token: %s (%s out, %s in), %.1f round trips\n",
                 format_bytes(static_cast<double>(r.decode.bytes_sent + r.decode.bytes_received) / steps).c_str(),
                 format_bytes(static_cast<double>(r.decode.bytes_sent) / steps).c_str(),
                 format_bytes(static_cast<double>(r.decode.bytes_received) / steps).c_str(),
                 static_cast<double>(r.decode.round_trips) / steps);
  }
}

}  // namespace tensorpc::tools
