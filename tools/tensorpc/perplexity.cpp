// `tensorpc perplexity` (perplexity.h): read and tokenize the text, place
// the model with a context of one chunk, score every chunk.
#include "tensorpc/perplexity.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <optional>

#include "api/model_internals.h"
#include "cli_checks.h"
#include "model/runtime/perplexity.h"

namespace tensorpc::tools {
namespace {

constexpr int64_t kDefaultChunk = 512;  // llama-perplexity's default context, so figures compare

// The chunk length: the flag's, or 512 capped at what the model was trained for.
int64_t chunk_length(int64_t flag, const LlamaHparams& hp) {
  if (flag > 0) return flag;
  return hp.n_ctx_train > 0 ? std::min(kDefaultChunk, hp.n_ctx_train) : kDefaultChunk;
}

}  // namespace

int perplexity_command(const PerplexityCommandOptions& o, std::FILE* out, std::FILE* err) {
  auto text = read_text_file(o.text_file);
  if (!text.ok()) {
    std::fprintf(err, "tensorpc perplexity: %s\n", text.status().message().c_str());
    return 1;
  }
  auto opened = LlamaModel::open(o.setup.model);
  if (!opened.ok()) {
    std::fprintf(err, "tensorpc perplexity: %s\n", opened.status().message().c_str());
    return 1;
  }
  ModelSetup setup = o.setup;
  setup.n_ctx = chunk_length(o.n_ctx, opened.value()->hparams());  // the cache holds one chunk
  auto opened_model = open_model(std::move(opened).value(), setup, err);
  if (!opened_model.ok()) {
    std::fprintf(err, "tensorpc perplexity: %s\n", opened_model.status().message().c_str());
    return 1;
  }
  const PlacedModel& placed = ModelInternals::placed(opened_model.value());
  const std::vector<int32_t> tokens = placed.model->tokenizer().encode(text.value());

  // One step per chunk where it is not too large: all its logits at once.
  GeneratorOptions go = ModelInternals::generator_options(opened_model.value());
  go.n_batch = std::min<int64_t>(setup.n_ctx, kDefaultChunk);
  Generator gen(*placed.model, *placed.placement, go);

  // The base model, placed where the model is, with the same chunk.
  std::optional<Model> base_model;
  std::optional<Generator> base;
  if (!o.kl_base.empty()) {
    auto opened_base = LlamaModel::open(o.kl_base);
    Status s = opened_base.status();
    if (s.ok())
      s = check_same_vocabulary(placed.model->tokenizer(), opened_base.value()->tokenizer(), "the base model");
    if (s.ok()) {
      ModelSetup base_setup = setup;
      base_setup.model = o.kl_base;
      auto placed_base = open_model(std::move(opened_base).value(), base_setup, err);
      if (placed_base.ok()) {
        base_model.emplace(std::move(placed_base).value());
      } else {
        s = placed_base.status();
      }
    }
    if (!s.ok()) {
      std::fprintf(err, "tensorpc perplexity: --kl-base %s: %s\n", o.kl_base.c_str(), s.message().c_str());
      return 1;
    }
    const PlacedModel& b = ModelInternals::placed(*base_model);
    GeneratorOptions base_go = ModelInternals::generator_options(*base_model);
    base_go.n_batch = go.n_batch;
    base.emplace(*b.model, *b.placement, base_go);
  }
  const bool tty = ::isatty(::fileno(err)) != 0;
  PerplexityOptions options;
  options.n_ctx = setup.n_ctx;
  options.max_chunks = o.chunks;
  options.base = base ? &*base : nullptr;
  options.on_chunk = [&](const PerplexityProgress& p) {
    const double tps = p.seconds > 0 ? static_cast<double>(p.chunks_done * setup.n_ctx) / p.seconds : 0;
    std::fprintf(err, "%schunk %lld/%lld: perplexity %.4f ± %.4f, %.0f tokens/s%s", tty ? "\r" : "",
                 static_cast<long long>(p.chunks_done), static_cast<long long>(p.chunks), p.stats->perplexity(),
                 p.stats->perplexity_error(), tps, tty && p.chunks_done < p.chunks ? "   " : "\n");
    std::fflush(err);
  };
  std::fprintf(err, "%zu tokens of %s, chunks of %lld\n", tokens.size(), o.text_file.c_str(),
               static_cast<long long>(setup.n_ctx));
  auto result = measure_perplexity(gen, tokens, options);
  if (!result.ok()) {
    std::fprintf(err, "tensorpc perplexity: %s\n", result.status().message().c_str());
    return 1;
  }
  const PerplexityResult& r = result.value();
  std::fprintf(out, "perplexity: %.4f ± %.4f over %lld tokens (%lld chunks of %lld)\n", r.stats.perplexity(),
               r.stats.perplexity_error(), static_cast<long long>(r.stats.count()), static_cast<long long>(r.chunks),
               static_cast<long long>(r.n_ctx));
  if (base) {
    const double same =
        r.kl.count() > 0 ? 100.0 * static_cast<double>(r.same_top) / static_cast<double>(r.kl.count()) : 0;
    std::fprintf(out, "KL divergence from %s: %.6f ± %.6f a token; the same top token for %.2f%% of %lld tokens\n",
                 o.kl_base.c_str(), r.kl.mean(), r.kl.mean_error(), same, static_cast<long long>(r.kl.count()));
  }
  std::fprintf(out, "evaluated %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(r.tokens_evaluated()),
               r.seconds, r.seconds > 0 ? static_cast<double>(r.tokens_evaluated()) / r.seconds : 0.0);
  return 0;
}

void add_perplexity_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("perplexity", "measure a model's perplexity on a text, chunk by chunk");
  auto o = std::make_shared<PerplexityCommandOptions>();
  cmd->add_option("-m,--model", o->setup.model, "the model, a GGUF file (llama, qwen2, qwen3, phi3, gemma, gemma2)")
      ->required();
  cmd->add_option("-f,--file", o->text_file, "the text to score")->required();
  cmd->add_option("-c,--ctx-size,--ctx", o->n_ctx, "tokens per chunk (0: 512, or the model's context when smaller)")
      ->check([](const std::string& s) { return s == "0" ? std::string() : whole_number(4, INT32_MAX)(s); })
      ->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "evaluate at most this many chunks (0: all)")
      ->check(whole_number(0, INT32_MAX))
      ->capture_default_str();
  cmd->add_option("--kl-base", o->kl_base,
                  "also the KL divergence of the model's next-token distributions from this model's (e.g. the f32 "
                  "file a quantized model came from; the same vocabulary), and how often both rank the same token "
                  "first");
  auto where = ModelSetupFlags::add_to(*cmd);
  cmd->callback([o, where, exit_code] {
    PerplexityCommandOptions options = *o;
    where->apply(options.setup);
    *exit_code = perplexity_command(options, stdout, stderr);
  });
}

}  // namespace tensorpc::tools
