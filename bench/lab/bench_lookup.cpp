// The speculative-decoding figures of `tensorpc bench` (bench_lookup.h).
#include "lab/bench_lookup.h"

#include <algorithm>
#include <memory>

#include "lab/bench_measure.h"
#include "lab/link_proxy.h"

namespace tensorpc::tools {
namespace {

// A passage twice, and its start once more: the model goes on quoting it.
constexpr const char* kRepeatingPrompt =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep.\n"
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep.\n"
    "In the beginning God";

// A user's message in the Llama 3 chat template (BOS is the tokenizer's), the reply to come.
constexpr const char* kChatPrompt =
    "<|start_header_id|>user<|end_header_id|>\n\nAnd God said, Let there be light: and there was "
    "light.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";

// What a speculation figure names.
struct Speculation {
  std::string id;        // "lookup", "draft"
  std::string what;      // in the decode figure's name
  std::string baseline;  // the baseline's name
  double target = 1;     // ≥ this × the baseline
};

// `m` decoding with `spec` (a speculating copy of `plain`) against `plain`,
// in turns, on two servers × two devices behind the link.
StatusOr<std::vector<Figure>> compare_speculation(const BenchModel& m, const ModelBenchOptions& plain,
                                                  const ModelBenchOptions& spec, const Speculation& s) {
  // Each layout places the model for itself (bench_model.cpp says why), on the same servers.
  const auto open = [&] { return LlamaModel::open(m.path, {.digest_dir = "off"}); };
  TENSORPC_ASSIGN_OR_RETURN(auto model_plain, open());
  TENSORPC_ASSIGN_OR_RETURN(auto model_spec, open());
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<LinkProxy>> proxies;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 2; ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(2, plain.threads, {}, plain.pin_threads));
    TENSORPC_ASSIGN_OR_RETURN(auto proxy, LinkProxy::start("127.0.0.1", server->port(), plain.link));
    endpoints.push_back(proxy->endpoint());
    servers.push_back(std::move(server));
    proxies.push_back(std::move(proxy));
  }
  TENSORPC_ASSIGN_OR_RETURN(auto on_plain, GenerationLayout::prepare(*model_plain, endpoints, plain));
  TENSORPC_ASSIGN_OR_RETURN(auto on_spec, GenerationLayout::prepare(*model_spec, endpoints, spec));
  for (int i = 0; i < std::max(1, plain.repetitions); ++i) {
    TENSORPC_RETURN_IF_ERROR(on_plain->measure());
    TENSORPC_RETURN_IF_ERROR(on_spec->measure());
  }
  const GenerationSpeed without = on_plain->speed(), with = on_spec->speed();
  const auto [low, high] = ratio_range(with.decode_runs, without.decode_runs);
  const std::string id = s.id + "." + m.key + ".";
  const std::string where = ", 2 servers x 2 devices, link " + plain.link.to_string();
  return std::vector<Figure>{
      {.id = id + "decode.2x2_link",
       .name = m.label + ", decode " + s.what + where,
       .value = with.decode_tps,
       .unit = "tok/s",
       .baseline = without.decode_tps,
       .baseline_name = s.baseline,
       .target = Target{.bound = Target::Bound::at_least, .limit = s.target},
       .ratio_low = low,
       .ratio_high = high},
      {.id = id + "tokens_per_step.2x2_link",
       .name = m.label + ", tokens per decode step " + s.what + where,
       .value = with.tokens_per_step,
       .unit = "tok/step",
       .baseline = without.tokens_per_step,
       .baseline_name = s.baseline},
  };
}

}  // namespace

StatusOr<std::vector<Figure>> bench_lookup_decode(const BenchModel& m, const ModelBenchOptions& o) {
  ModelBenchOptions plain = o;
  plain.prompt = kRepeatingPrompt;
  plain.n_predict = std::max(o.n_predict, 64);
  ModelBenchOptions lookup = plain;
  lookup.lookup = true;
  return compare_speculation(m, plain, lookup,
                             {.id = "lookup",
                              .what = "with --lookup on a text that repeats its prompt",
                              .baseline = "same without lookup",
                              .target = 1.5});
}

StatusOr<std::vector<Figure>> bench_draft_decode(const BenchModel& m, const std::string& draft_path,
                                                 const ModelBenchOptions& o) {
  ModelBenchOptions plain = o;
  plain.prompt = kChatPrompt;
  plain.special = true;
  plain.n_predict = std::max(o.n_predict, 64);
  ModelBenchOptions drafted = plain;
  drafted.draft_model = draft_path;
  return compare_speculation(m, plain, drafted,
                             {.id = "draft",
                              .what = "with its draft model on a chat reply",
                              .baseline = "same without a draft model",
                              .target = 1.8});
}

}  // namespace tensorpc::tools
