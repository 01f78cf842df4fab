// A llama-family GGUF file with random weights, for tests and benchmarks that
// need a model of a given shape and type but not a trained one.
//
// The file is complete — hyper-parameters, every weight, a SentencePiece-style
// vocabulary with <unk> <s> </s>, all 256 byte tokens and made-up pieces — so
// LlamaModel::open loads it like any other, and what it generates is noise.
// Weights are drawn from a fixed seed: the same options give the same file.
#pragma once

#include <cstdint>
#include <string>

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
};

// Writes the model to `path` (atomically, through GgufWriter::write).
Status write_random_llama(const std::string& path, const RandomModelOptions& options);

}  // namespace tensorpc::tools
