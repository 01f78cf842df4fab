// The token endpoints (serve/token_api.h) on the bundled BPE model's
// tokenizer: /tokenize and /detokenize round-trip text, with and without the
// model's special tokens and pieces; /apply-template renders a conversation
// as a chat completion would; every problem is a 400 naming the field.
#include "serve/token_api.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <variant>

#include "model/arch/llama_model.h"

namespace tensorpc::serve {
namespace {

using json = nlohmann::json;

class TokenApi : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
    model = LlamaModel::open(path).value();
  }
  const Tokenizer& tok() const { return model->tokenizer(); }
  static json answer(const std::variant<std::string, ApiError>& a) {
    if (auto* e = std::get_if<ApiError>(&a)) ADD_FAILURE() << e->message;
    return std::holds_alternative<std::string>(a) ? json::parse(std::get<std::string>(a)) : json();
  }
  static ApiError refusal(const std::variant<std::string, ApiError>& a) {
    EXPECT_TRUE(std::holds_alternative<ApiError>(a)) << std::get<std::string>(a);
    return std::holds_alternative<ApiError>(a) ? std::get<ApiError>(a) : ApiError{};
  }
  std::unique_ptr<LlamaModel> model;
};

TEST_F(TokenApi, TokenizeAndDetokenizeRoundTrip) {
  const json t = answer(tokenize_json(tok(), R"({"content": "In the beginning God created"})"));
  ASSERT_TRUE(t["tokens"].is_array());
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), tok().encode("In the beginning God created", false));
  const json d = answer(detokenize_json(tok(), json{{"tokens", t["tokens"]}}.dump()));
  EXPECT_EQ(d["content"], "In the beginning God created");

  const json special = answer(tokenize_json(tok(), R"({"content": "Amen", "add_special": true})"));
  EXPECT_EQ(special["tokens"].get<std::vector<int32_t>>(), tok().encode("Amen", true));
  const json pieces = answer(tokenize_json(tok(), R"({"content": "In the", "with_pieces": true})"));
  std::string joined;
  for (const json& p : pieces["tokens"]) {
    EXPECT_TRUE(p["id"].is_number_integer());
    joined += p["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, "In the");
}

TEST_F(TokenApi, ProblemsAre400sNamingTheField) {
  EXPECT_EQ(refusal(tokenize_json(tok(), "{}")).param, "content");
  EXPECT_EQ(refusal(tokenize_json(tok(), R"({"content": 5})")).param, "content");
  EXPECT_EQ(refusal(tokenize_json(tok(), R"({"content": "x", "add_special": "yes"})")).param, "add_special");
  EXPECT_EQ(refusal(tokenize_json(tok(), "[1]")).code, "invalid_json");
  EXPECT_EQ(refusal(detokenize_json(tok(), R"({"tokens": "12"})")).param, "tokens");
  EXPECT_EQ(refusal(detokenize_json(tok(), R"({"tokens": [1, -1]})")).param, "tokens[1]");
  const std::string past = R"({"tokens": [)" + std::to_string(tok().n_tokens()) + "]}";
  EXPECT_EQ(refusal(detokenize_json(tok(), past)).param, "tokens[0]");
  EXPECT_EQ(refusal(detokenize_json(tok(), "{}")).param, "tokens");
}

TEST_F(TokenApi, ApplyTemplateRendersAsAChatWould) {
  const ChatTemplate chatml = ChatTemplate::named("chatml").value();
  const std::string body = R"({"messages": [{"role": "user", "content": "Who made the heaven?"}]})";
  const json r = answer(apply_template_json(&chatml, "", body));
  const std::vector<ChatMessage> messages = {{"user", "Who made the heaven?"}};
  EXPECT_EQ(r["prompt"], chatml.render(messages, true).value());
  const ApiError none = refusal(apply_template_json(nullptr, "tokenizer.chat_template is absent", body));
  EXPECT_EQ(none.code, "no_chat_template");
  EXPECT_NE(none.message.find("tokenizer.chat_template is absent"), std::string::npos);
  EXPECT_EQ(refusal(apply_template_json(&chatml, "", "{}")).param, "messages");
}

TEST_F(TokenApi, ApplyTemplateRendersTheToolsAndARequiredCallsOpener) {
  const ChatTemplate chatml = ChatTemplate::named("chatml").value();
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get_weather"}}])";
  const std::string ask = R"({"messages": [{"role": "user", "content": "Weather?"}], )";
  const std::string prompt = answer(apply_template_json(&chatml, "", ask + tools + "}"))["prompt"];
  EXPECT_NE(prompt.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}\n</tools>"),
            std::string::npos)
      << prompt;
  const std::string required =
      answer(apply_template_json(&chatml, "", ask + tools + R"(, "tool_choice": "required"})"))["prompt"];
  EXPECT_EQ(required, prompt + "<tool_call>\n");
  const std::string none =
      answer(apply_template_json(&chatml, "", ask + tools + R"(, "tool_choice": "none"})"))["prompt"];
  EXPECT_EQ(none.find("<tools>"), std::string::npos);
  const ChatTemplate gemma = ChatTemplate::named("gemma").value();
  EXPECT_EQ(refusal(apply_template_json(&gemma, "", ask + tools + "}")).param, "tools");
}

}  // namespace
}  // namespace tensorpc::serve
