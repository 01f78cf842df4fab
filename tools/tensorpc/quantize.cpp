// `tensorpc quantize` (quantize.h): check the arguments, show the plan's
// fallbacks, convert with a progress display, and sum up.
#include "tensorpc/quantize.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/format.h"
#include "device_spec.h"
#include "model/gguf/gguf.h"
#include "model/quantize/quantize_model.h"

namespace tensorpc::tools {
namespace {

std::string shape_of(const TensorQuantization& t) {
  std::string s = "[" + std::to_string(t.ne[0]);
  int dims = 4;
  while (dims > 1 && t.ne[static_cast<size_t>(dims - 1)] == 1) --dims;
  for (int d = 1; d < dims; ++d) s += ", " + std::to_string(t.ne[static_cast<size_t>(d)]);
  return s + "]";
}

// Whether `a` and `b` name one file (or would: b need not exist yet).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (std::filesystem::equivalent(a, b, ec)) return true;
  const auto ca = std::filesystem::weakly_canonical(a, ec);
  if (ec) return false;
  const auto cb = std::filesystem::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

// Shows each converted tensor: a bar redrawn in place on a terminal, else a line each.
class QuantizeProgress {
 public:
  QuantizeProgress(std::FILE* err, const std::vector<TensorQuantization>& plan)
      : err_(err), tty_(::isatty(::fileno(err)) != 0), count_(plan.size()) {
    for (const TensorQuantization& t : plan) total_ += t.bytes_in;
  }

  void tensor_done(size_t index, const TensorQuantization& t) {
    done_ += t.bytes_in;
    const double fraction = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
    if (!tty_) {
      std::fprintf(err_, "[%*zu/%zu] %-28s %-14s %6s -> %-6s %9s -> %s\n", width(), index + 1, count_, t.name.c_str(),
                   shape_of(t).c_str(), name_of(t.from), name_of(t.to.type),
                   format_bytes(static_cast<double>(t.bytes_in)).c_str(),
                   format_bytes(static_cast<double>(t.bytes_out)).c_str());
      return;
    }
    constexpr int kBar = 30;
    const int filled = static_cast<int>(fraction * kBar);
    std::fprintf(err_, "\rquantizing [%s%s] %3.0f%% %zu/%zu %-32.32s",
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kBar - filled), '.').c_str(), 100.0 * fraction, index + 1, count_,
                 t.name.c_str());
    if (index + 1 == count_) std::fprintf(err_, "\n");
    std::fflush(err_);
  }

  // After a failure: end a half-drawn bar so the error starts on its own line.
  void abandon() {
    if (tty_ && done_ > 0) std::fprintf(err_, "\n");
  }

 private:
  int width() const { return static_cast<int>(std::to_string(count_).size()); }

  std::FILE* err_;
  bool tty_;
  size_t count_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
};

}  // namespace

int quantize_command(const QuantizeCommandOptions& o, std::FILE* out, std::FILE* err) {
  const std::optional<QuantMix> mix = parse_quant_mix(o.type);
  if (!mix) {
    std::fprintf(err, "tensorpc quantize: unknown type '%s' (valid: %s)\n", o.type.c_str(), quant_mix_names().c_str());
    return 2;
  }
  if (same_file(o.input, o.output)) {
    std::fprintf(err, "tensorpc quantize: the output %s is the input: give another path\n", o.output.c_str());
    return 1;
  }
  auto file = GgufFile::open(o.input);
  if (!file.ok()) {
    std::fprintf(err, "tensorpc quantize: cannot read %s: %s\n", o.input.c_str(), file.status().message().c_str());
    return 1;
  }
  const GgufFile& in = *file.value();
  const QuantMixInfo& info = mix_info(*mix);

  const std::vector<TensorQuantization> plan = plan_quantization(in, *mix);
  for (const TensorQuantization& t : plan) {
    if (!t.to.fell_back()) continue;
    std::fprintf(err, "%s: rows of %lld are not a multiple of %lld (the block of %s): using %s\n", t.name.c_str(),
                 static_cast<long long>(t.ne[0]), static_cast<long long>(block_size(t.to.wanted)), name_of(t.to.wanted),
                 name_of(t.to.type));
  }

  QuantizeProgress progress(err, plan);
  QuantizeOptions options;
  options.threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.on_tensor = [&progress](size_t i, const TensorQuantization& t) { progress.tensor_done(i, t); };
  auto summary = quantize_gguf(in, o.output, *mix, options);
  if (!summary.ok()) {
    progress.abandon();
    std::fprintf(err, "tensorpc quantize: cannot write %s: %s\n", o.output.c_str(), summary.status().message().c_str());
    return 1;
  }

  const QuantizeSummary& s = summary.value();
  const size_t fallbacks = static_cast<size_t>(
      std::count_if(s.tensors.begin(), s.tensors.end(), [](const TensorQuantization& t) { return t.to.fell_back(); }));
  const double ratio =
      s.file_bytes_in ? static_cast<double>(s.file_bytes_out) / static_cast<double>(s.file_bytes_in) : 0;
  std::fprintf(out, "%s: %s (general.file_type %u), %zu tensors, %zu fallback%s, %d thread%s\n", o.output.c_str(),
               info.name, info.file_type, s.tensors.size(), fallbacks, fallbacks == 1 ? "" : "s", options.threads,
               options.threads == 1 ? "" : "s");
  std::fprintf(out, "size: %s -> %s (%.3f of the input)\n", format_bytes(static_cast<double>(s.file_bytes_in)).c_str(),
               format_bytes(static_cast<double>(s.file_bytes_out)).c_str(), ratio);
  return 0;
}

void add_quantize_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("quantize", "write a quantized copy of a GGUF model");
  auto o = std::make_shared<QuantizeCommandOptions>();
  cmd->add_option("input", o->input, "the model to quantize, a GGUF file")->required();
  cmd->add_option("output", o->output, "the file to write")->required();
  cmd->add_option("type", o->type, "the quantization mix: " + quant_mix_names() + " (any case)")->required();
  cmd->add_option("-t,--threads", o->threads, "threads quantizing rows (0: every core)")
      ->check(check_thread_count)
      ->capture_default_str();
  cmd->callback([o, exit_code] { *exit_code = quantize_command(*o, stdout, stderr); });
}

}  // namespace tensorpc::tools
