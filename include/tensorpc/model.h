// tensorpc::Model: a GGUF language model (llama, qwen2, qwen3, phi3, gemma,
// gemma2) opened for inference on the local CPU, on the devices of
// tensorpc servers, or spread over both — what a program needs to run a model
// without reaching into the library's parts.
//
//   tensorpc::ModelOptions options;
//   options.path = "models/kjv-tiny.gguf";
//   options.servers = {"10.0.0.2:50052"};  // optional: every device of each
//   auto model = tensorpc::Model::open(options);
//   if (!model.ok()) { /* model.status().to_string() names the file and why */ }
//   auto text = model.value().generate("In the beginning", {}, [](std::string_view piece, int32_t) {
//     std::fwrite(piece.data(), 1, piece.size(), stdout);
//     return true;  // false stops after this token
//   });
//
// open() reads the file, connects to the servers, puts the weights that
// `tensor_overrides` name on their devices, gives each device a contiguous run
// of layers (in proportion to `split`, else to free memory) and uploads the
// weights — the same steps, with the same options, as
// `tensorpc run -m PATH --rpc … -t … -c …`.
//
// Ownership: a Model owns the opened file, the connections to its servers
// and the buffers on every device; destroying it frees them (and the servers
// free what its connections allocated). It is move-only; a moved-from Model
// may only be destroyed or assigned to. One thread at a time
// may tokenize, detokenize and generate; cancel() may be called from any
// thread while another generates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensorpc/rpc_client.h"
#include "tensorpc/status.h"

namespace tensorpc {

struct ModelInfo;

// One `--override-tensor REGEX=DEVICE`: the weights whose GGUF name
// (`blk.3.ffn_up.weight`) `pattern`, an ECMAScript regular expression, is
// found in go to the device named `device` as ModelInfo::devices and the
// placement table name it: "cpu", "vulkan:0", "HOST:PORT/cpu0" (a server's
// device, as `tensorpc devices` lists it).
struct TensorOverride {
  std::string pattern;
  std::string device;
};

// What happens when a server is lost while the model runs (its process
// killed or restarted, its machine gone, frozen past RemoteOptions::
// reply_timeout). The step that failed is abandoned; the model waits up to
// `reconnect_wait_s` for the server to answer again and loads its layers
// there again (its weights cache, in memory or kept with --cache, makes that
// a transfer of hashes), else moves them to the first `standby` server that
// answers, else shares them out over the devices left (as a start without
// that server would: by `split` less its devices, or by free memory). Then
// it evaluates again the tokens the sequence holds, as a prefill, to rebuild
// the KV cache, and goes on: the text is the one an unbroken run gives.
// When nothing can take the server's place, generate() fails with
// StatusCode::unavailable naming the server and what was tried, and the next
// generate() tries again.
struct RecoveryOptions {
  bool enabled = true;           // false: a lost server's error ends the generation (`--no-recover`)
  double reconnect_wait_s = 30;  // seconds to wait for a lost server to answer again (≥ 0)
  // Servers ("host:port") connected and checked by open() that hold no
  // layers: a lost server's layers go to the first that answers. A lost
  // server that comes back later joins the end of the list.
  std::vector<std::string> standby;
  // One line for each thing lost and done ("server 10.0.0.3:50052 lost: …").
  // May be empty. Called from the thread that generates.
  std::function<void(const std::string& line)> on_event;
};

// What Model::open takes: the file, and where the model runs.
struct ModelOptions {
  std::string path;                  // the GGUF file
  std::vector<std::string> servers;  // "host:port" of tensorpc servers; all their devices are used, in order
  RemoteOptions remote;              // the servers' key and TLS CA; default: TENSORPC_KEY_FILE, TENSORPC_TLS_CA
  bool use_local_cpu = true;         // the local devices first in the device list; false: none, needs servers
  // The local devices, in order: "cpu", "vulkan" (every Vulkan device) or
  // "vulkan:N" (in a build with the Vulkan device). With GPUs and no "cpu",
  // a local CPU joins last to run what the GPUs do not compute, holding no
  // layers.
  std::vector<std::string> local_devices{"cpu"};
  int threads = 0;                   // threads of the local CPU; 0: every core
  std::vector<double> split;         // layers per device in proportion, one ratio per device; empty: by free memory
  int64_t context_size = 0;          // positions of the KV cache; 0: the model's context, at most 2048
  // Weights placed by name, in order: the first override whose pattern a
  // weight's name matches puts it on its device; the other weights go with
  // their layers, the layers shared out by what each device has left. An
  // override whose pattern is no regular expression or matches no weight, a
  // device name no device has, or overrides that overfill a device fail
  // open() with a message naming them (and, for a name, the devices there are).
  std::vector<TensorOverride> tensor_overrides;
  // Called once the file is read, before any server is reached or byte
  // uploaded, with what the model is (`devices` and `placement` still empty);
  // a failure it returns ends open() with that status. May be empty.
  std::function<Status(const ModelInfo& info)> on_open;
  // Called as the weights are uploaded: bytes done, bytes in all, and the
  // device they went to. May be empty.
  std::function<void(uint64_t done, uint64_t total, const std::string& device)> on_progress;
  RecoveryOptions recovery;  // when a server is lost
  // A draft model for speculative decoding: a small model with the same
  // vocabulary (same tokens, same BOS and EOS; open() refuses another, naming
  // the difference), placed whole on `draft_device` with the same context.
  // Each decode step it guesses up to GenerationOptions::draft_max tokens,
  // one cheap step each, and the model checks them in one step: the text is
  // the one decoding without it gives, in fewer steps (fewer round trips to
  // the servers) the more of its guesses are right.
  std::string draft_path;            // empty: none
  std::string draft_device = "cpu";  // "cpu", "vulkan:N", or a server's device "HOST:PORT/NAME"
};

// How the next token is picked (the defaults of `tensorpc run`). The chain:
// presence and frequency penalties and logit biases, repeat penalty over the
// last repeat_last_n tokens, then greedy when temperature is 0, else top-k,
// temperature, top-p, min-p and a draw.
struct SamplingOptions {
  float temperature = 0.8f;     // >= 0; 0: greedy (the most likely token)
  int top_k = 40;               // >= 0; 0: off
  float top_p = 0.95f;          // in (0, 1]; 1: off
  float min_p = 0.05f;          // in [0, 1]; 0: off
  float repeat_penalty = 1.0f;  // > 0; 1: off
  int repeat_last_n = 64;       // >= 0; 0: off
  uint64_t seed = 0;            // the same seed gives the same tokens
  // OpenAI's penalties, in [-2, 2] (0: off): a token generated so far loses
  // presence_penalty from its logit once, and frequency_penalty for every
  // time it came, before the chain.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Added to those tokens' logits before the chain: (token id, bias in
  // [-100, 100]); -100 all but bans a token.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // A grammar in GBNF (root ::= …) the generated text must follow: only
  // tokens that keep it a valid prefix are sampled, and the end of text only
  // once it is complete. Empty: none. A JSON Schema becomes one with
  // json_schema_grammar().
  std::string grammar;

  // invalid_argument naming the first value out of its range (NaN included),
  // as generate() checks it: a caller can check before it loads a model.
  Status validate() const;
};

// The GBNF grammar of the JSON that `schema` (a JSON Schema, as text)
// describes, for SamplingOptions::grammar; invalid_argument naming a keyword
// the schema has that tensorpc does not follow. With an empty schema: any
// JSON object.
StatusOr<std::string> json_schema_grammar(std::string_view schema);

struct GenerationOptions {
  int max_tokens = 64;  // tokens to generate at most (>= 1)
  SamplingOptions sampling;
  bool stop_at_end = true;  // stop at the end of the text (EOS, or an end-of-turn token)
  bool special = false;     // the prompt may spell control tokens ("<s>"), and generated ones print
  // Speculative decoding by prompt lookup: each step also checks up to
  // draft_max tokens drafted from earlier text (the prompt and the text so
  // far) that the text may repeat. The tokens are exactly those decoding
  // without it gives — greedy, and sampled under the same seed — in fewer
  // steps when the text repeats itself: fewer round trips over a network.
  // A model opened with a draft model (ModelOptions::draft_path) speculates
  // with it instead; lookup then is invalid_argument.
  bool lookup = false;
  int draft_max = 8;  // >= 1: draft tokens a step checks at most
};

// Why a generation ended.
enum class FinishReason {
  max_tokens,    // GenerationOptions::max_tokens were generated
  end_of_text,   // the model ended the text (that token is in `tokens`, not in `text`)
  context_full,  // the next token would not fit in the context
  stopped,       // the token callback returned false
  cancelled,     // Model::cancel() was called
};

struct Generation {
  std::string text;             // the generated text (the prompt not included)
  std::vector<int32_t> tokens;  // the generated token ids
  FinishReason finish = FinishReason::max_tokens;
  int64_t prompt_tokens = 0;  // tokens of the prompt, BOS included
  double prompt_seconds = 0;  // evaluating the prompt, through the first token
  double decode_seconds = 0;  // the rest
  int decode_steps = 0;       // evaluations after the prompt's (one token each, or with lookup a token and its draft)
  // With lookup or a draft model: the tokens drafted, those of them the sampler picked too
  // (the rest were dropped), and the steps that checked a draft.
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  int64_t draft_steps = 0;
  // What those steps cost this client on the network, summed over its servers
  // (all 0 on the local CPU alone).
  uint64_t decode_bytes_sent = 0;
  uint64_t decode_bytes_received = 0;
  uint64_t decode_round_trips = 0;
  // The last step's plan: the device of each node, the splits, the copies
  // and the bytes crossing each boundary.
  std::string schedule;
};

// Called once for each generated token that does not end the text, with its
// id and the text it completes — empty while a character is incomplete, so
// the pieces join to valid UTF-8. Returning false stops after that token.
// A last call with token -1 may follow, carrying bytes still held back at
// the end (an incomplete character); its return value is ignored.
using TokenCallback = std::function<bool(std::string_view piece, int32_t token)>;

// What the model is and where it runs.
struct ModelInfo {
  std::string architecture;  // "llama", "qwen2", …
  int64_t layers = 0;
  int64_t embedding_size = 0;
  int64_t heads = 0;     // attention heads
  int64_t kv_heads = 0;  // key/value heads (fewer than heads with grouped-query attention)
  int64_t vocabulary_size = 0;
  int64_t experts = 0;          // a mixture of experts: the experts of each layer; 0: dense
  int64_t experts_used = 0;     // of which each token runs this many
  int64_t context_size = 0;     // positions of the KV cache (ModelOptions::context_size, resolved)
  int64_t trained_context = 0;  // the context the model was trained for; 0: not given
  uint64_t parameters = 0;
  std::vector<std::string> devices;  // device names, in placement order
  // A table: device, layers, weight bytes, KV-cache bytes; with
  // tensor_overrides, the tensors and bytes each put on its device.
  std::string placement;
  // The upload to the servers: the weight bytes their devices took, and the
  // bytes sent to them meanwhile — fewer where their weights caches already
  // held the weights (only hashes go then). Both 0 without servers.
  uint64_t server_weight_bytes = 0;
  uint64_t server_bytes_sent = 0;
  // A caveat of a load that went through (the weights' digests could not be
  // saved, so the next load hashes them again); empty when there is none.
  std::string warning;
  // The draft model and where it runs ("kjv-bpe-draft: 2 layers on cpu,
  // 2.9 MiB"); empty without one.
  std::string draft;
  std::vector<std::string> standby;  // the standby servers not yet used (RecoveryOptions::standby)
  uint64_t recoveries = 0;           // lost servers recovered from so far
};

class Model {
 public:
  // Opens options.path and places it on the devices. Errors name the file
  // and what is wrong with it, the server that could not be reached, or the
  // device that lacked room.
  static StatusOr<Model> open(const ModelOptions& options);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // The tokens of `text`; add_special puts BOS (and whatever the model adds)
  // around it; parse_special reads text that spells a control token as that
  // token (otherwise it is ordinary text).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = false) const;
  // The text of `tokens` as one sequence (a leading BOS and the space the
  // tokenizer prefixed are dropped); control tokens show only with `special`.
  // An id outside the vocabulary is invalid_argument.
  StatusOr<std::string> detokenize(std::span<const int32_t> tokens, bool special = false) const;

  // Continues `prompt`, handing each token to `on_token` (may be empty) as
  // it is generated. Each call starts a new sequence. A cancelled or stopped
  // generation is not an error: its result says so and holds what came.
  StatusOr<Generation> generate(std::string_view prompt, const GenerationOptions& options = {},
                                const TokenCallback& on_token = {});
  // Ends the generation in progress, if any, before its next token; the one
  // after it runs normally. Safe from any thread.
  void cancel();

  ModelInfo info() const;

 private:
  friend struct ModelInternals;  // the library's own commands (src/api/model_internals.h)
  struct State;
  explicit Model(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tensorpc
