// `tensorpc run` (run.h): flags, then a tensorpc::Model opened (model_setup.h) and generated from.
// Text goes to stdout as it is generated; everything about the run (the
// placement, progress, speeds) goes to stderr so stdout can be piped.
#include "tensorpc/run.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "awake_cores.h"
#include "cli_checks.h"
#include "core/format.h"
#include "sampling_flags.h"

namespace tensorpc::tools {

int run_command(const RunOptions& o, std::FILE* out, std::FILE* err) {
  // Checked before anything is loaded: a bad value should not cost an upload.
  if (const Status s = o.sampler.validate(); !s.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", s.to_string().c_str());
    return 1;
  }
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    auto text = read_text_file(o.prompt_file);
    if (!text.ok()) {
      std::fprintf(err, "tensorpc run: -f: %s\n", text.status().message().c_str());
      return 1;
    }
    prompt = std::move(text).value();
  }
  SamplingOptions sampling = o.sampler;
  if (!o.grammar_file.empty() || !o.json_schema_file.empty()) {
    const bool gbnf = !o.grammar_file.empty();
    auto text = read_text_file(gbnf ? o.grammar_file : o.json_schema_file);
    if (text.ok() && !gbnf) text = json_schema_grammar(text.value());
    if (text.ok()) {
      sampling.grammar = std::move(text).value();
      if (Status s = sampling.validate(); !s.ok()) text = s;
    }
    if (!text.ok()) {
      std::fprintf(err, "tensorpc run: %s: %s\n", gbnf ? "--grammar" : "--json-schema",
                   text.status().message().c_str());
      return 1;
    }
  }
  const auto awake = AwakeCores::request_if(o.awake_cores);  // held until the command returns
  if (!awake.ok()) {
    std::fprintf(err, "tensorpc run: --awake-cores: %s\n", awake.status().message().c_str());
    return 1;
  }
  auto model = open_model(o.setup, err);
  if (!model.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", model.status().message().c_str());
    return 1;
  }
  GenerationOptions g;
  g.max_tokens = o.n_predict;
  g.sampling = sampling;
  g.special = o.special;
  g.lookup = o.lookup.lookup;
  g.draft_max = o.lookup.draft_max;
  // Refused before it is echoed: a prompt the context cannot hold is a wrong argument.
  const size_t prompt_tokens = model.value().tokenize(prompt, true, o.special).size();
  const int64_t context = model.value().info().context_size;
  if (static_cast<int64_t>(prompt_tokens) >= context) {
    std::fprintf(err,
                 "tensorpc run: the prompt has %zu tokens; the context holds %lld, the reply included (-c sets it)\n",
                 prompt_tokens, static_cast<long long>(context));
    return 1;
  }
  std::fprintf(out, "%s", prompt.c_str());
  std::fflush(out);
  auto result = model.value().generate(prompt, g, [out](std::string_view piece, int32_t) {
    std::fwrite(piece.data(), 1, piece.size(), out);
    std::fflush(out);
    return true;
  });
  std::fprintf(out, "\n");
  std::fflush(out);
  if (!result.ok()) {
    std::fprintf(err, "tensorpc run: %s\n", result.status().to_string().c_str());
    return 1;
  }
  if (result.value().finish == FinishReason::context_full) {
    std::fprintf(err, "generation stopped at the end of the context (%lld positions; -c sets it)\n",
                 static_cast<long long>(model.value().info().context_size));
  }
  print_speed(result.value(), err);
  if (o.show_schedule) std::fprintf(err, "\n%s", result.value().schedule.c_str());
  return 0;
}

void print_speed(const Generation& g, std::FILE* out) {
  const size_t generated = g.tokens.size();
  const double prompt_tps = g.prompt_seconds > 0 ? static_cast<double>(g.prompt_tokens) / g.prompt_seconds : 0;
  // The tokens after the first (the prompt's step gave it): one a step, or more with lookup.
  const double decoded = static_cast<double>(g.decode_steps + g.accepted_tokens);
  const double gen_tps = g.decode_seconds > 0 ? decoded / g.decode_seconds : 0;
  std::fprintf(out, "prompt: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(g.prompt_tokens),
               g.prompt_seconds, prompt_tps);
  std::fprintf(out, "generation: %zu tokens, %d decode steps in %.3f s (%.1f tokens/s)\n", generated, g.decode_steps,
               g.decode_seconds, gen_tps);
  if (g.draft_steps > 0) {
    std::fprintf(out,
                 "speculation: %lld of %lld drafted tokens accepted (%.0f%%) in %lld steps, %.2f tokens per step\n",
                 static_cast<long long>(g.accepted_tokens), static_cast<long long>(g.drafted_tokens),
                 g.drafted_tokens > 0 ? 100.0 * static_cast<double>(g.accepted_tokens) / g.drafted_tokens : 0.0,
                 static_cast<long long>(g.draft_steps), g.decode_steps > 0 ? decoded / g.decode_steps : 0.0);
  }
  if (g.decode_steps > 0 && g.decode_bytes_sent + g.decode_bytes_received > 0) {
    const double steps = decoded;
    std::fprintf(out, "client traffic per generated token: %s (%s out, %s in), %.1f round trips\n",
                 format_bytes(static_cast<double>(g.decode_bytes_sent + g.decode_bytes_received) / steps).c_str(),
                 format_bytes(static_cast<double>(g.decode_bytes_sent) / steps).c_str(),
                 format_bytes(static_cast<double>(g.decode_bytes_received) / steps).c_str(),
                 static_cast<double>(g.decode_round_trips) / steps);
  }
}

void add_run_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("run", "generate text from a GGUF model on local and remote devices");
  auto o = std::make_shared<RunOptions>();
  cmd->add_option("-m,--model", o->setup.model, "the model, a GGUF file (llama, qwen2, qwen3, phi3, gemma, gemma2)")
      ->required();
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "the text to continue");
  auto* file = cmd->add_option("-f,--file", o->prompt_file, "read the text to continue from a file")->excludes(prompt);
  cmd->add_flag("--special", o->special,
                "treat text that spells a control token (<|im_start|>, <s>) as that token, and print control "
                "tokens; without it, prompt text is only text and control tokens print nothing");
  cmd->add_option("-n,--n-predict", o->n_predict, "tokens to generate at most")
      ->check(whole_number(1, INT32_MAX))
      ->capture_default_str();
  auto where = ModelSetupFlags::add_to(*cmd);
  cmd->add_option("-c,--ctx-size,--ctx", o->setup.n_ctx, "context length (0: the model's, at most 2048)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  add_sampling_flags(*cmd, &o->sampler);
  add_lookup_flags(*cmd, &o->lookup, &o->setup);
  auto* grammar = cmd->add_option("--grammar", o->grammar_file, "a GBNF grammar file the generated text follows");
  cmd->add_option("--json-schema", o->json_schema_file, "a JSON Schema file the generated text follows (as JSON)")
      ->excludes(grammar);
  cmd->add_flag_callback(
      "--awake-cores", [o] { o->awake_cores = kCpuLatencyPath; }, kAwakeCoresHelp);
  cmd->add_flag("--show-schedule", o->show_schedule,
                "print the last step's plan (node -> device, splits, copies, bytes per boundary) after the run");
  cmd->callback([o, where, exit_code, prompt, file] {
    if (prompt->count() == 0 && file->count() == 0) {
      throw CLI::RequiredError("give the text to continue with -p TEXT or -f FILE");
    }
    RunOptions options = *o;
    where->apply(options.setup);
    *exit_code = run_command(options, stdout, stderr);
  });
}

}  // namespace tensorpc::tools
