// tokenizer_from_gguf: the tokenizer.ggml.* keys into a Vocabulary, checked
// by Tokenizer::create. See tokenizer_gguf.h.
#include "model/text/tokenizer_gguf.h"

namespace tensorpc {
namespace {

// Reads an optional i32 key into *out (left as is when absent).
Status read_id(const GgufFile& f, const char* key, int32_t* out) {
  TENSORPC_ASSIGN_OR_RETURN(*out, f.get_i32(key, *out));
  return Status();
}

Status read_flag(const GgufFile& f, const char* key, bool* out) {
  TENSORPC_ASSIGN_OR_RETURN(*out, f.get_bool(key, *out));
  return Status();
}

StatusOr<Vocabulary> read_vocabulary(const GgufFile& f) {
  TENSORPC_ASSIGN_OR_RETURN(const std::string model, f.get_string("tokenizer.ggml.model", "llama"));
  Vocabulary v;
  if (model == "gpt2") {
    v.kind = VocabularyKind::bpe;
  } else if (model != "llama") {
    return unsupported("tokenizer.ggml.model is '" + model +
                       "'; tensorpc reads 'llama' (SentencePiece) and 'gpt2' (byte-level BPE)");
  }
  const bool bpe = v.kind == VocabularyKind::bpe;

  TENSORPC_ASSIGN_OR_RETURN(v.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (f.has("tokenizer.ggml.scores")) {
    TENSORPC_ASSIGN_OR_RETURN(std::vector<float> scores, f.get_f32_array("tokenizer.ggml.scores"));
    // BPE merges by rank: scores, if a converter wrote them, mean nothing.
    if (!bpe) v.scores = std::move(scores);
  }
  if (f.has("tokenizer.ggml.token_type")) {
    TENSORPC_ASSIGN_OR_RETURN(v.types, f.get_i32_array("tokenizer.ggml.token_type"));
  }
  if (bpe) {
    auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status().with_context("a gpt2 (byte-level BPE) vocabulary needs merges");
    v.merges = std::move(merges).value();
    TENSORPC_ASSIGN_OR_RETURN(v.pre, f.get_string("tokenizer.ggml.pre", "default"));
    v.bos = v.eos = v.unk = -1;
    v.add_space_prefix = false;
    // Llama 3's tokenizer adds BOS; GPT-2's and Qwen 2's do not.
    v.add_bos = v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3";
  }
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", &v.bos));
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", &v.eos));
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", &v.unk));
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eot_token_id", &v.eot));
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eom_token_id", &v.eom));
  TENSORPC_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.padding_token_id", &v.pad));
  TENSORPC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  TENSORPC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  if (!bpe) TENSORPC_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  return v;
}

}  // namespace

StatusOr<Tokenizer> tokenizer_from_gguf(const GgufFile& file) {
  auto vocab = read_vocabulary(file);
  if (!vocab.ok()) return vocab.status().with_context("tokenizer");
  return Tokenizer::create(std::move(vocab).value());
}

}  // namespace tensorpc
