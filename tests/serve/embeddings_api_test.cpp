// The embeddings endpoints' JSON (serve/embeddings_api.h): OpenAI's input in
// its four shapes and Ollama's in its two, the other fields, every problem a
// 400 naming the field; the answers' shapes, base64 as float32 bytes.
#include "serve/embeddings_api.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

namespace tensorpc::serve {
namespace {

using json = nlohmann::json;

EmbeddingsRequest parsed(const std::variant<EmbeddingsRequest, ApiError>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<EmbeddingsRequest>(r) ? std::get<EmbeddingsRequest>(r) : EmbeddingsRequest{};
}

ApiError refusal(const std::variant<EmbeddingsRequest, ApiError>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(EmbeddingsRequest, InputIsAStringStringsTokensOrListsOfTokens) {
  EmbeddingsRequest one = parsed(parse_embeddings_request(R"({"input": "hello", "model": "m"})"));
  EXPECT_EQ(one.texts, std::vector<std::string>{"hello"});
  EXPECT_FALSE(one.is_tokens);
  EXPECT_EQ(one.model, "m");
  EXPECT_FALSE(one.base64);
  EXPECT_EQ(one.dimensions, 0);

  EmbeddingsRequest list = parsed(parse_embeddings_request(R"({"input": ["a", "b c"]})"));
  EXPECT_EQ(list.texts, (std::vector<std::string>{"a", "b c"}));

  EmbeddingsRequest ids = parsed(parse_embeddings_request(R"({"input": [1, 2, 3]})"));
  EXPECT_TRUE(ids.is_tokens);
  EXPECT_EQ(ids.tokens, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));

  EmbeddingsRequest lists = parsed(parse_embeddings_request(R"({"input": [[1, 2], [3]], "user": "u"})"));
  EXPECT_TRUE(lists.is_tokens);
  EXPECT_EQ(lists.tokens, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_EQ(lists.user, "u");

  EmbeddingsRequest b64 =
      parsed(parse_embeddings_request(R"({"input": "x", "encoding_format": "base64", "dimensions": 64})"));
  EXPECT_TRUE(b64.base64);
  EXPECT_EQ(b64.dimensions, 64);
}

TEST(EmbeddingsRequest, ProblemsAre400sNamingTheField) {
  const auto param_of = [](std::string_view body) {
    const ApiError e = refusal(parse_embeddings_request(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
    return e.param;
  };
  EXPECT_EQ(param_of(R"({"model": "m"})"), "input");
  EXPECT_EQ(param_of(R"({"input": ""})"), "input");
  EXPECT_EQ(param_of(R"({"input": []})"), "input");
  EXPECT_EQ(param_of(R"({"input": 5})"), "input");
  EXPECT_EQ(param_of(R"({"input": ["a", ""]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input": [[1], []]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input": ["a", [1]]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input": [1, -2]})"), "input[1]");
  EXPECT_EQ(param_of(R"({"input": [[1, 2.5]]})"), "input[0][1]");
  EXPECT_EQ(param_of(R"({"input": "a", "encoding_format": "int8"})"), "encoding_format");
  EXPECT_EQ(param_of(R"({"input": "a", "dimensions": 0})"), "dimensions");
  EXPECT_EQ(param_of(R"({"input": "a", "model": 3})"), "model");
  EXPECT_EQ(param_of(R"({"input": "a", "user": false})"), "user");
  json many{{"input", std::vector<std::string>(kMaxEmbeddingInputs + 1, "x")}};
  EXPECT_EQ(param_of(many.dump()), "input");
  EXPECT_EQ(refusal(parse_embeddings_request("[1]")).code, "invalid_json");
  EXPECT_EQ(refusal(parse_embeddings_request("{")).code, "invalid_json");
}

TEST(EmbeddingsRequest, OllamasInputIsTextOnlyAndTruncatesByDefault) {
  EmbeddingsRequest r = parsed(parse_ollama_embed_request(R"({"model": "m", "input": ["a", "b"]})"));
  EXPECT_EQ(r.texts, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.truncate);
  EXPECT_FALSE(parsed(parse_ollama_embed_request(R"({"input": "a", "truncate": false})")).truncate);
  EXPECT_EQ(refusal(parse_ollama_embed_request(R"({"input": [1, 2]})")).param, "input[0]");
  EXPECT_EQ(refusal(parse_ollama_embed_request(R"({"input": ""})")).param, "input");
}

TEST(EmbeddingsResponse, ListsEachVectorWithItsIndexAndTheUsage) {
  const std::vector<std::vector<float>> vectors{{0.5f, -0.25f}, {1.0f, 0.0f}};
  const json r = json::parse(embeddings_json("m", vectors, false, 7));
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "m");
  ASSERT_EQ(r["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r["data"][i]["object"], "embedding");
    EXPECT_EQ(r["data"][i]["index"], i);
    EXPECT_EQ(r["data"][i]["embedding"].get<std::vector<float>>(), vectors[i]);
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(r["usage"]["total_tokens"], 7);

  const json o = json::parse(ollama_embed_json("m", vectors, 7, 0.5));
  EXPECT_EQ(o["embeddings"].get<std::vector<std::vector<float>>>(), vectors);
  EXPECT_EQ(o["prompt_eval_count"], 7);
}

// Decodes RFC 4648 base64 (the test's own, to check the encoder against).
std::vector<uint8_t> from_base64(const std::string& text) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> out;
  uint32_t bits = 0;
  int have = 0;
  for (char c : text) {
    if (c == '=') break;
    bits = bits << 6 | static_cast<uint32_t>(alphabet.find(c));
    have += 6;
    if (have >= 8) {
      have -= 8;
      out.push_back(static_cast<uint8_t>(bits >> have));
    }
  }
  return out;
}

TEST(EmbeddingsResponse, Base64IsTheLittleEndianFloat32Bytes) {
  for (const std::vector<float>& v : {std::vector<float>{1.0f}, {1.0f, -2.5f}, {0.1f, 0.2f, 0.3f}}) {
    const std::string text = base64_floats(v);
    EXPECT_EQ(text.size() % 4, 0u);
    const std::vector<uint8_t> bytes = from_base64(text);
    ASSERT_EQ(bytes.size(), v.size() * 4);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t bits =
          bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 | static_cast<uint32_t>(bytes[4 * i + 3]) << 24;
      float x = 0;
      std::memcpy(&x, &bits, 4);
      EXPECT_EQ(x, v[i]);
    }
  }
  EXPECT_EQ(base64_floats(std::vector<float>{1.0f}), "AACAPw==");  // 00 00 80 3f
  const json r = json::parse(embeddings_json("m", {{1.0f}}, true, 1));
  EXPECT_EQ(r["data"][0]["embedding"], "AACAPw==");
}

}  // namespace
}  // namespace tensorpc::serve
