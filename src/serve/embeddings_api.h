// Embeddings, as the JSON layer: OpenAI's POST /v1/embeddings and Ollama's
// POST /api/embed, the bodies clients send and the answers (no HTTP, no
// model: the routes tokenize the texts and the engine makes the vectors).
//
// OpenAI's body: "input" (required) a non-empty string, a non-empty array
// of non-empty strings, a non-empty array of token ids, or a non-empty array
// of non-empty arrays of token ids — at most kMaxEmbeddingInputs inputs;
// "model" a string; "encoding_format" "float" (the default) or "base64"
// (each vector's float32 values, little-endian, base64-encoded, as OpenAI
// sends them); "dimensions" an integer >= 1 (the routes accept only the
// model's width: tensorpc does not shorten vectors); "user" a string.
//
// Ollama's body: "input" a non-empty string or array of non-empty strings,
// "model", "truncate" (default true: an input longer than the context is
// cut to fit; false: refused), "dimensions" as OpenAI's, and "keep_alive"
// and "options" (ignored: the model stays loaded, and embeddings sample
// nothing).
//
// Problems are 400s naming the field, as in openai_request.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serve/openai_request.h"

namespace tensorpc::serve {

struct EmbeddingsRequest {
  std::string model;                         // "" when absent
  std::vector<std::string> texts;            // the inputs as text, or
  std::vector<std::vector<int32_t>> tokens;  // as token ids (ids >= 0; the engine checks the vocabulary)
  bool is_tokens = false;
  bool base64 = false;     // encoding_format "base64"
  int64_t dimensions = 0;  // 0: not given
  bool truncate = true;    // Ollama's: cut what the context cannot hold
  std::string user;
};

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body);
std::variant<EmbeddingsRequest, ApiError> parse_ollama_embed_request(std::string_view body);

// {"object":"list","data":[{"object":"embedding","index":i,"embedding":[floats] or "base64"}],
//  "model","usage":{"prompt_tokens","total_tokens"}}
std::string embeddings_json(std::string_view model, const std::vector<std::vector<float>>& vectors, bool base64,
                            int64_t prompt_tokens);
// {"model","embeddings":[[floats]],"total_duration","load_duration","prompt_eval_count"}
std::string ollama_embed_json(std::string_view model, const std::vector<std::vector<float>>& vectors,
                              int64_t prompt_tokens, double seconds);

// The values' float32 bytes, little-endian, in base64 (RFC 4648, padded).
std::string base64_floats(std::span<const float> values);

// The most inputs one request may carry (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

}  // namespace tensorpc::serve
