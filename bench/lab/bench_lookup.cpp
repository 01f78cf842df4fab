// The lookup figure of `tensorpc bench` (bench_lookup.h).
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

}  // namespace

StatusOr<std::vector<Figure>> bench_lookup_decode(const BenchModel& m, const ModelBenchOptions& o) {
  // Each layout places the model for itself (bench_model.cpp says why), on the same servers.
  const auto open = [&] { return LlamaModel::open(m.path, {.digest_dir = "off"}); };
  TENSORPC_ASSIGN_OR_RETURN(auto model_plain, open());
  TENSORPC_ASSIGN_OR_RETURN(auto model_lookup, open());
  std::vector<std::unique_ptr<Server>> servers;
  std::vector<std::unique_ptr<LinkProxy>> proxies;
  std::vector<std::string> endpoints;
  for (int i = 0; i < 2; ++i) {
    TENSORPC_ASSIGN_OR_RETURN(auto server, start_loopback_server(2, o.threads, {}, o.pin_threads));
    TENSORPC_ASSIGN_OR_RETURN(auto proxy, LinkProxy::start("127.0.0.1", server->port(), o.link));
    endpoints.push_back(proxy->endpoint());
    servers.push_back(std::move(server));
    proxies.push_back(std::move(proxy));
  }
  ModelBenchOptions plain = o;
  plain.prompt = kRepeatingPrompt;
  plain.n_predict = std::max(o.n_predict, 64);
  ModelBenchOptions lookup = plain;
  lookup.lookup = true;
  TENSORPC_ASSIGN_OR_RETURN(auto on_plain, GenerationLayout::prepare(*model_plain, endpoints, plain));
  TENSORPC_ASSIGN_OR_RETURN(auto on_lookup, GenerationLayout::prepare(*model_lookup, endpoints, lookup));
  for (int i = 0; i < std::max(1, o.repetitions); ++i) {
    TENSORPC_RETURN_IF_ERROR(on_plain->measure());
    TENSORPC_RETURN_IF_ERROR(on_lookup->measure());
  }
  const GenerationSpeed without = on_plain->speed(), with = on_lookup->speed();
  const auto [low, high] = ratio_range(with.decode_runs, without.decode_runs);
  const std::string id = "lookup." + m.key + ".";
  const std::string where = ", 2 servers x 2 devices, link " + o.link.to_string();
  return std::vector<Figure>{
      {.id = id + "decode.2x2_link",
       .name = m.label + ", decode with --lookup on a text that repeats its prompt" + where,
       .value = with.decode_tps,
       .unit = "tok/s",
       .baseline = without.decode_tps,
       .baseline_name = "same without lookup",
       .target = Target{.bound = Target::Bound::at_least, .limit = 1.5},
       .ratio_low = low,
       .ratio_high = high},
      {.id = id + "tokens_per_step.2x2_link",
       .name = m.label + ", tokens per decode step with --lookup" + where,
       .value = with.tokens_per_step,
       .unit = "tok/step",
       .baseline = without.tokens_per_step,
       .baseline_name = "same without lookup"},
  };
}

}  // namespace tensorpc::tools
