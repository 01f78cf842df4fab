// A GGUF file with random weights, of any architecture tensorpc runs (llama,
// qwen2, qwen3, phi3, gemma, gemma2, and the mixtures of experts Mixtral
// (llama with experts), qwen2moe, qwen3moe, gpt-oss: model/arch/arch.h), for tests and benchmarks
// that need a model of a given shape and type but not a trained one.
//
// The file is complete — hyper-parameters under the architecture's prefix,
// every weight its description names, a SentencePiece-style
// vocabulary with <unk> <s> </s>, all 256 byte tokens and made-up pieces — so
// LlamaModel::open loads it like any other, and what it generates is noise.
// Weights are drawn from a fixed seed: the same options give the same file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorpc/dtype.h"
#include "tensorpc/status.h"

namespace tensorpc::tools {

struct RandomModelOptions {
  int64_t n_vocab = 320;  // at least 259 (3 special and 256 byte tokens)
  int64_t n_embd = 64;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;  // < n_head: grouped-query attention
  int64_t n_ff = 128;
  int64_t n_ctx = 256;
  DType type = DType::f32;  // of the matrices (token_embd, attention, ffn, output); norms are f32
  uint64_t seed = 1;
  std::string arch = "llama";  // general.architecture
  int64_t n_head_dim = 0;      // written as attention.key_length and value_length when > 0
  float rope_freq_base = 10000.0f;
  // Written as rope.scaling.type when not empty (any text: tests of refusals
  // write unknown ones), with rope.scaling.factor and, for "yarn",
  // rope.scaling.original_context_length.
  std::string rope_scaling = {};
  float rope_scaling_factor = 1.0f;
  int64_t rope_original_context = 0;  // 0: n_ctx
  bool rope_freqs = false;            // a rope_freqs.weight of factors in [1, 8)
  int64_t sliding_window = 0;         // attention.sliding_window when > 0
  float attn_softcap = 0.0f;          // gemma2's soft-caps, written when > 0
  float final_softcap = 0.0f;
  bool tied_output = false;           // no output.weight: the embedding projects the output
  int64_t pooling_type = -1;          // written as pooling_type (embeddings) when >= 0
  // Mixture of experts (needed by qwen2moe, qwen3moe and gpt-oss; llama with
  // experts is Mixtral): n_expert experts of n_ff_exp (0, and llama: n_ff), n_expert_used
  // a token; qwen2moe's shared expert n_ff_shexp (0: n_ff) wide.
  int64_t n_expert = 0;
  int64_t n_expert_used = 2;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  // The experts' matrices' type, when it differs from `type` (gpt-oss ships them in mxfp4).
  std::optional<DType> expert_type = std::nullopt;
};

// Writes the model to `path` (atomically, through GgufWriter::write).
Status write_random_llama(const std::string& path, const RandomModelOptions& options);
// `path` as is when a file is there (a model written by an earlier run), else
// the model written there by write_random_llama. Returns `path`.
StatusOr<std::string> write_random_llama_once(const std::string& path, const RandomModelOptions& options);
// The same file's bytes, in memory.
StatusOr<std::vector<uint8_t>> random_model_bytes(const RandomModelOptions& options);

}  // namespace tensorpc::tools
