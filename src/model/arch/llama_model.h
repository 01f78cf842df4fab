// LlamaModel: a GGUF file of an architecture tensorpc runs (arch.h: llama,
// qwen2, qwen3, phi3, gemma, gemma2) opened for inference — its
// hyper-parameters, a descriptor for every weight, and its tokenizer.
//
// open() reads and checks everything the forward pass needs (the
// architecture's keys under its own prefix, `qwen2.*` say — arch_hparams.h —,
// the tensor names and shapes, the `tokenizer.ggml.*` keys) without touching
// the weights' bytes; a file with a key or tensor whose meaning tensorpc does
// not implement is refused with an error naming it. The weights' bytes stay
// in the file's mapping until a ModelPlacement uploads them to devices
// (placement.h).
//
// It also keeps the digests of its tensors' bytes (WeightDigests), so that
// loading it again onto a server's weights cache hashes nothing: for a file,
// in the digest store of its identity (read on first use of digests()); for
// bytes in memory, in memory only.
//
// Ownership: the model owns the mapped file, the descriptors' Context, the
// tokenizer and the digests. Descriptors are placed into buffers by whoever
// loads the model; a model must outlive those buffers' use. The digests are a
// memo that loading writes through a const model: like the descriptors, they
// are used by one placement at a time (placement.h), so that is safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/arch/llama.h"
#include "model/gguf/gguf.h"
#include "model/gguf/weight_digests.h"
#include "model/text/tokenizer.h"
#include "tensorpc/context.h"

namespace tensorpc {

struct ModelOpenOptions {
  // The directory of the digest store (WeightDigests); unset:
  // WeightDigests::default_dir(); "" or "off": the digests stay in memory.
  std::optional<std::string> digest_dir;
};

class LlamaModel {
 public:
  // Errors name the file and what is wrong: the key, the tensor, the shape.
  static StatusOr<std::unique_ptr<LlamaModel>> open(const std::string& path, ModelOpenOptions options = {});
  // The same from bytes already in memory (tests); they must outlive the model.
  static StatusOr<std::unique_ptr<LlamaModel>> open_memory(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  const ArchDescription& arch() const { return *arch_; }
  const LlamaHparams& hparams() const { return hp_; }
  const LlamaWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& file() const { return *file_; }
  // The digests of the tensors' bytes, keyed by their offset in the file.
  WeightDigests& digests() const;

  // The file's record of the tensor behind a weight descriptor (for upload).
  const GgufTensorInfo* info_of(const Tensor* weight) const;
  // Bytes of every weight of one layer, and of the tensors outside layers.
  uint64_t layer_bytes(int64_t layer) const;
  uint64_t embedding_bytes() const;  // token_embd (and rope_freqs, which lives with it)
  uint64_t output_bytes() const;     // output_norm and output (0 more when tied)
  uint64_t parameter_count() const;

 private:
  LlamaModel() = default;
  static StatusOr<std::unique_ptr<LlamaModel>> from_file(std::unique_ptr<GgufFile> file, std::string name);
  Status read_hparams();
  Status read_weights();
  Status read_tokenizer();

  std::string name_;
  const ArchDescription* arch_ = &kArchLlama;
  std::unique_ptr<GgufFile> file_;
  LlamaHparams hp_;
  Context ctx_;
  LlamaWeights weights_;
  std::vector<std::pair<const Tensor*, const GgufTensorInfo*>> infos_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string digest_dir_;                          // "" for memory only
  mutable std::unique_ptr<WeightDigests> digests_;  // read on first use
};

}  // namespace tensorpc
