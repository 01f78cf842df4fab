// `tensorpc run` (run.h): flags, then open → devices → place → generate.
// Text goes to stdout as it is generated; everything about the run (the
// placement, progress, speeds) goes to stderr so stdout can be piped.
#include "tensorpc/run.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "awake_cores.h"
#include "cli_checks.h"
#include "device_spec.h"
#include "tensorpc/devices.h"
#include "tensorpc/generation.h"

namespace tensorpc::tools {

int run_command(const RunOptions& o, std::FILE* out, std::FILE* err) {
  const SamplerOptions sampling{.temperature = o.temperature,
                                .top_k = o.top_k,
                                .top_p = o.top_p,
                                .repeat_penalty = o.repeat_penalty,
                                .seed = o.seed};
  // Checked before anything is loaded: a bad value should not cost an upload.
  if (const Status s = sampling.validate(); !s.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", s.to_string().c_str());
    return 1;
  }
  const auto awake = AwakeCores::request_if(o.awake_cores);  // held until the command returns
  if (!awake.ok()) {
    std::fprintf(err, "tensorpc run: --awake-cores: %s\n", awake.status().message().c_str());
    return 1;
  }
  auto model = LlamaModel::open(o.model);
  if (!model.ok()) {
    std::fprintf(err, "tensorpc run: cannot open %s: %s\n", o.model.c_str(), model.status().to_string().c_str());
    return 1;
  }
  auto remote = remote_options(o.client);
  if (!remote.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", remote.status().message().c_str());
    return 1;
  }
  auto devices = DeviceSet::connect(o.use_local, o.threads, o.endpoints, remote.value());
  if (!devices.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", devices.status().to_string().c_str());
    return 1;
  }
  const std::vector<Device*> list = devices.value().devices();
  if (!o.split.empty() && o.split.size() != list.size()) {
    std::fprintf(err, "tensorpc run: --split gives %zu ratios for %zu devices (in order:", o.split.size(),
                 list.size());
    for (Device* d : list) std::fprintf(err, " %s", d->name().c_str());
    std::fprintf(err, ")\n");
    return 1;
  }
  const LlamaHparams& hp = model.value()->hparams();
  std::fprintf(err, "model %s: %lld layers, %lld embd, %lld heads (%lld kv), vocab %lld, %.1f M parameters\n",
               o.model.c_str(), static_cast<long long>(hp.n_layer), static_cast<long long>(hp.n_embd),
               static_cast<long long>(hp.n_head), static_cast<long long>(hp.n_head_kv),
               static_cast<long long>(hp.n_vocab), static_cast<double>(model.value()->parameter_count()) / 1e6);
  auto placement = load_model(*model.value(), list, devices.value().endpoints(), o.split, o.n_ctx, err);
  if (!placement.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", placement.status().to_string().c_str());
    return 1;
  }
  std::fprintf(err, "%s", placement.value()->table().c_str());

  GenerateOptions g;
  g.n_predict = o.n_predict;
  g.sampler = sampling;
  std::fprintf(out, "%s", o.prompt.c_str());
  std::fflush(out);
  auto result = generate(*model.value(), *placement.value(), o.prompt, g, [out](std::string_view piece) {
    std::fwrite(piece.data(), 1, piece.size(), out);
    std::fflush(out);
  });
  std::fprintf(out, "\n");
  std::fflush(out);
  if (!result.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", result.status().to_string().c_str());
    return 1;
  }
  print_speed(result.value(), err);
  if (o.show_schedule) std::fprintf(err, "\n%s", result.value().schedule.c_str());
  return 0;
}

void add_run_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("run", "generate text from a llama GGUF model on local and remote devices");
  auto o = std::make_shared<RunOptions>();
  auto rpc = std::make_shared<std::vector<std::string>>();
  auto split = std::make_shared<std::string>();
  auto local_only = std::make_shared<bool>(false);
  auto no_local = std::make_shared<bool>(false);
  cmd->add_option("-m,--model", o->model, "the model, a llama GGUF file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "the text to continue")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate at most")
      ->check(whole_number(1, INT32_MAX))
      ->capture_default_str();
  auto* rpc_opt = cmd->add_option("--rpc", *rpc, "servers whose devices to use, host:port[,host:port…] (repeatable)");
  add_client_flags(*cmd, o->client);
  cmd->add_option("--split", *split, "layers per device in proportion, one ratio per device in order (default: by free memory)")
      ->check([](const std::string& s) {
        auto r = parse_split(s);
        return r.ok() ? std::string() : r.status().message();
      });
  cmd->add_option("-t,--threads", o->threads, "threads of the local CPU (0: every core)")
      ->check(check_thread_count)
      ->capture_default_str();
  cmd->add_option("--ctx", o->n_ctx, "context length (0: the model's, at most 2048)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("--temp", o->temperature, "temperature; 0: greedy")
      ->check(finite_number("a finite number ≥ 0", [](double x) { return x >= 0; }))
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "keep the k most likely tokens (0: off)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "keep the most likely tokens up to this probability")
      ->check(finite_number("a number in (0, 1]", [](double x) { return x > 0 && x <= 1; }))
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "penalty of recently seen tokens (1: off)")
      ->check(finite_number("a finite number > 0", [](double x) { return x > 0; }))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "random seed")->check(whole_number(0, INT64_MAX))->capture_default_str();
  auto* local_opt = cmd->add_flag("--local-only", *local_only, "use the local CPU only");
  cmd->add_flag_callback(
      "--awake-cores", [o] { o->awake_cores = kCpuLatencyPath; }, kAwakeCoresHelp);
  cmd->add_flag("--show-schedule", o->show_schedule,
                "print the last step's plan (node -> device, splits, copies, bytes per boundary) after the run");
  local_opt->excludes(rpc_opt);
  cmd->add_flag("--no-local", *no_local, "use only the servers' devices, not the local CPU")
      ->needs(rpc_opt)
      ->excludes(local_opt);
  cmd->callback([o, rpc, split, no_local, exit_code] {
    RunOptions options = *o;
    options.endpoints = split_endpoints(*rpc);
    if (!split->empty()) options.split = parse_split(*split).value();  // checked by the option
    options.use_local = !*no_local;
    *exit_code = run_command(options, stdout, stderr);
  });
}

}  // namespace tensorpc::tools
