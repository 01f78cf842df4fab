// LlamaModel: a llama-family GGUF file opened for inference — its
// hyper-parameters, a descriptor for every weight, and its tokenizer.
//
// open() reads and checks everything the forward pass needs (the standard
// `llama.*` keys, the tensor names and shapes, the `tokenizer.ggml.*` keys)
// without touching the weights' bytes; they stay in the file's mapping until
// a ModelPlacement uploads them to devices (placement.h).
//
// Ownership: the model owns the mapped file, the descriptors' Context and the
// tokenizer. Descriptors are placed into buffers by whoever loads the model;
// a model must outlive those buffers' use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "tensorpc/context.h"

namespace tensorpc {

class LlamaModel {
 public:
  // Errors name the file and what is wrong: the key, the tensor, the shape.
  static StatusOr<std::unique_ptr<LlamaModel>> open(const std::string& path);
  // The same from bytes already in memory (tests); they must outlive the model.
  static StatusOr<std::unique_ptr<LlamaModel>> open_memory(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  const LlamaHparams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }

  // The file's record of the tensor behind a weight descriptor (for upload).
  const GgufTensorInfo* info_of(const Tensor* weight) const;
  // Bytes of every weight of one layer, and of the tensors outside layers.
  uint64_t layer_bytes(int64_t layer) const;
  uint64_t embedding_bytes() const;  // token_embd
  uint64_t output_bytes() const;     // output_norm and output (0 more when tied)
  uint64_t parameter_count() const;

 private:
  LlamaModel() = default;
  static StatusOr<std::unique_ptr<LlamaModel>> from_file(std::unique_ptr<GgufFile> file, std::string name);
  Status read_hparams();
  Status read_weights();
  Status read_tokenizer();

  std::string name_;
  std::unique_ptr<GgufFile> file_;
  LlamaHparams hp_;
  Context ctx_;
  LlamaWeights weights_;
  std::vector<std::pair<const Tensor*, const GgufTensorInfo*>> infos_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace tensorpc
