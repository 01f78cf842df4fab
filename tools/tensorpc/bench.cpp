// `tensorpc bench` (bench.h): its flags, and the run with idle cores held awake.
#include "tensorpc/bench.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <memory>

#include "awake_cores.h"
#include "cli_checks.h"
#include "core/log.h"
#include "device_spec.h"
#include "model/quantize/quantize_mix.h"
#include "tensorpc/demo.h"

namespace tensorpc::tools {

int bench_with_awake_cores(BenchOptions options, const std::string& awake_cores, std::FILE* out, std::FILE* err) {
  const auto awake = AwakeCores::request_if(awake_cores);  // held until the bench returns
  if (!awake.ok()) {
    std::fprintf(err, "tensorpc bench: --awake-cores: %s\n", awake.status().message().c_str());
    return 1;
  }
  options.cores_kept_awake = !awake_cores.empty();
  return bench_command(options, out, err);
}

void add_bench_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd =
      app.add_subcommand("bench", "measure RPC, hand-over, model decode, GPU and load figures against their baselines");
  auto o = std::make_shared<BenchOptions>();
  o->bundled_model = bundled_model_path();
  o->bundled_chat_model = bundled_chat_model_path();
  o->bundled_draft_model = bundled_draft_model_path();
  auto link = std::make_shared<std::string>("1ms,1gbit");
  auto awake_cores = std::make_shared<std::string>();
  cmd->add_flag("--quick", o->quick, "a short run: 1 and 64 MiB, the bundled model and q8_0, few tokens");
  cmd->add_flag_callback(
      "--awake-cores", [awake_cores] { *awake_cores = kCpuLatencyPath; }, kAwakeCoresHelp);
  cmd->add_option("--json", o->json_path, "write every figure to this JSON file");
  cmd->add_option("--plot", o->plot_path, "write an SVG bar chart of the figures against their targets");
  cmd->add_option("--link", *link, "the emulated LAN link: one-way delay and rate per direction")
      ->check([](const std::string& s) {
        auto r = parse_link(s);
        return r.ok() ? std::string() : r.status().message();
      })
      ->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "repetitions per figure, median reported (0: 5, quick 3)")
      ->check(whole_number(0, 1000));
  cmd->add_option("-t,--threads", o->threads, "threads of the local CPU and of each server device (0: every core)")
      ->check(check_thread_count);
  cmd->add_option("-n,--tokens", o->n_predict, "tokens per generation (0: 33, quick 9)")
      ->check(whole_number(0, INT32_MAX));
  cmd->add_option("--quant", o->quant_mixes,
                  "quantization mixes of the random 250M model to measure (default Q8_0, Q4_0, F16, F32, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL; "
                  "quick: Q4_K_M)")
      ->delimiter(',')
      ->check([](const std::string& s) {
        return parse_quant_mix(s) ? std::string() : "unknown mix " + s + " (" + quant_mix_names() + ")";
      });
  auto* quant_only = cmd->add_flag("--quant-only", o->quant_only,
                                   "only the quantized-model figures (decode and prefill of the 250M model)");
  auto* serve_only =
      cmd->add_flag("--serve-only", o->serve_only,
                    "only the serving figures (8 requests at once against one, the 250M model over 2 servers)")
          ->excludes(quant_only);
  cmd->add_flag("--gpu-only", o->gpu_only,
                "only the local GPUs' figures (decode bytes/s against a device copy, prefill GFLOP/s against an FMA "
                "shader)")
      ->excludes(quant_only)
      ->excludes(serve_only);
  cmd->add_flag("--moe-only", o->moe_only,
                "only the mixture-of-experts figures (a random 8-expert model's decode bytes/s and prefill against a "
                "dense model of its active size)")
      ->excludes(quant_only)
      ->excludes(serve_only);
  cmd->add_flag("--lookup-only", o->lookup_only,
                "only the speculative-decoding figures (decode with --lookup, and with the bundled draft model, "
                "against without, the bundled models on 2 servers over the link)")
      ->excludes(quant_only)
      ->excludes(serve_only);
  cmd->add_flag("--load-only", o->load_only,
                "only the load figures of a random 888 MB model (cold and warm on loopback, onto 2 servers over "
                "the link at once, from a server's --models directory)")
      ->excludes(quant_only)
      ->excludes(serve_only);
  auto device_list = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--device", *device_list,
                  "local devices, comma-separated (cpu, vulkan, vulkan:N): the GPUs of the GPU figures "
                  "(default: every Vulkan device there is)")
      ->delimiter(',')
      ->check([](const std::string& s) {
        auto r = parse_device_spec(s);
        return r.ok() ? std::string() : r.status().message();
      });
  cmd->callback([o, link, awake_cores, device_list, exit_code] {
    BenchOptions options = *o;
    if (!device_list->empty()) {
      options.gpu_devices.emplace();
      for (const std::string& s : *device_list) {
        const DeviceSpec spec = parse_device_spec(s).value();  // checked by the option
        if (spec.kind == DeviceKind::gpu) options.gpu_devices->push_back(spec.index);
      }
      if (options.gpu_only && options.gpu_devices->empty()) {
        std::fprintf(stderr, "tensorpc bench: --gpu-only: --device names no GPU\n");
        *exit_code = 1;
        return;
      }
    }
    options.link = parse_link(*link).value();  // checked by the option
    // The in-process servers log each session at info: quiet unless asked.
    if (std::getenv("TENSORPC_LOG") == nullptr) log::set_level(log::Level::warn);
    *exit_code = bench_with_awake_cores(options, *awake_cores, stdout, stderr);
  });
}

}  // namespace tensorpc::tools
