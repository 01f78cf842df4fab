// The embeddings endpoints' JSON (embeddings_api.h).
#include "serve/embeddings_api.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "serve/json_fields.h"
#include "serve/request_input.h"

namespace tensorpc::serve {
namespace {

using ojson = nlohmann::ordered_json;

std::string dumped(const ojson& value) { return value.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ApiError empty_input(const std::string& param) {
  std::string message = "'";
  message += param;
  message += "' is empty: give a text or tokens to embed";
  return invalid_request("invalid_value", param, std::move(message));
}

// One input, a string or (`tokens_allowed`) an array of token ids, as
// request->texts or request->tokens, which ever the first input chose.
Problem read_one_input(const json& value, const std::string& param, bool tokens_allowed, EmbeddingsRequest* request) {
  const bool as_tokens = tokens_allowed && value.is_array();
  if (request->texts.size() + request->tokens.size() > 0 && as_tokens != request->is_tokens) {
    return invalid_request("invalid_type", param,
                           "'" + param + "' is " + kind_of(value) +
                               ": the inputs of one request are all strings or all arrays of token ids");
  }
  request->is_tokens = as_tokens;
  if (as_tokens) {
    if (value.empty()) return empty_input(param);
    request->tokens.emplace_back();
    return read_tokens(value, param, &request->tokens.back());
  }
  std::string text;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string(value, param, &text));
  if (text.empty()) return empty_input(param);
  request->texts.push_back(std::move(text));
  return std::nullopt;
}

// "input": a string, or an array of inputs (or, with `tokens_allowed`, of token ids).
Problem read_input(const json& body, bool tokens_allowed, EmbeddingsRequest* request) {
  const json* input = field(body, "input");
  if (input == nullptr) return missing_field("input");
  if (input->is_string()) return read_one_input(*input, "input", false, request);
  const char* expected = tokens_allowed ? "a string, an array of strings, an array of token ids or an array of "
                                          "arrays of token ids"
                                        : "a string or an array of strings";
  if (!input->is_array()) return wrong_type("input", expected, *input);
  if (input->empty()) return empty_input("input");
  if (tokens_allowed && (*input)[0].is_number()) return read_one_input(*input, "input", true, request);
  if (input->size() > kMaxEmbeddingInputs) {
    return invalid_request("invalid_value", "input",
                           "'input' holds " + std::to_string(input->size()) + " inputs; at most " +
                               std::to_string(kMaxEmbeddingInputs) + " are allowed");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    TENSORPC_SERVE_RETURN_IF_PROBLEM(read_one_input((*input)[i], indexed("input", i), tokens_allowed, request));
  }
  return std::nullopt;
}

Problem read_common(const json& body, bool openai, EmbeddingsRequest* request) {
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_input(body, openai, request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(body, "model", &request->model));
  return read_integer_field(body, "dimensions", 1, std::numeric_limits<int32_t>::max(), ">= 1", &request->dimensions);
}

}  // namespace

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body) {
  std::variant<json, ApiError> parsed = parse_json_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& object = std::get<json>(parsed);
  EmbeddingsRequest request;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_common(object, /*openai=*/true, &request));
  std::string format = "float";
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(object, "encoding_format", &format));
  if (format != "float" && format != "base64") {
    return invalid_request("invalid_value", "encoding_format",
                           "'encoding_format' must be \"float\" or \"base64\", not " + shown(format));
  }
  request.base64 = format == "base64";
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_string_field(object, "user", &request.user));
  return request;
}

std::variant<EmbeddingsRequest, ApiError> parse_ollama_embed_request(std::string_view body) {
  std::variant<json, ApiError> parsed = parse_json_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& object = std::get<json>(parsed);
  EmbeddingsRequest request;
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_common(object, /*openai=*/false, &request));
  TENSORPC_SERVE_RETURN_IF_PROBLEM(read_bool_field(object, "truncate", &request.truncate));
  return request;
}

std::string base64_floats(std::span<const float> values) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    for (size_t b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<uint8_t>(bits >> (8 * b));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = static_cast<uint32_t>(bytes[i]) << 16;
    if (n > 1) group |= static_cast<uint32_t>(bytes[i + 1]) << 8;
    if (n > 2) group |= bytes[i + 2];
    for (size_t c = 0; c < 4; ++c) out += c <= n ? kAlphabet[(group >> (18 - 6 * c)) & 63] : '=';
  }
  return out;
}

std::string embeddings_json(std::string_view model, const std::vector<std::vector<float>>& vectors, bool base64,
                            int64_t prompt_tokens) {
  ojson data = ojson::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    ojson item{{"object", "embedding"}, {"index", i}};
    if (base64) {
      item["embedding"] = base64_floats(vectors[i]);
    } else {
      item["embedding"] = vectors[i];
    }
    data.push_back(std::move(item));
  }
  return dumped(ojson{{"object", "list"},
                      {"data", std::move(data)},
                      {"model", model},
                      {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

std::string ollama_embed_json(std::string_view model, const std::vector<std::vector<float>>& vectors,
                              int64_t prompt_tokens, double seconds) {
  return dumped(ojson{{"model", model},
                      {"embeddings", vectors},
                      {"total_duration", static_cast<int64_t>(seconds * 1e9)},
                      {"load_duration", 0},
                      {"prompt_eval_count", prompt_tokens}});
}

}  // namespace tensorpc::serve
