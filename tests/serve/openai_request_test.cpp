// OpenAI request bodies (serve/openai_request.h): each field's accepted
// types, ranges and defaults, the error (status, code, param) for each
// wrong one, the features refused by name, and bodies that are not JSON
// objects at all, hostile ones included.
#include "serve/openai_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <variant>

namespace tensorpc::serve {
namespace {

constexpr uint64_t kDefaultSeed = 0x1234'5678'9abc'def0ull;

std::variant<CompletionRequest, ApiError> parse(Endpoint endpoint, std::string_view body) {
  return parse_completion_request(endpoint, body, kDefaultSeed);
}

CompletionRequest accepted(Endpoint endpoint, std::string_view body) {
  auto result = parse(endpoint, body);
  if (const ApiError* error = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << "refused " << body << ": " << error->code << " " << error->param << ": " << error->message;
    return {};
  }
  return std::get<CompletionRequest>(result);
}

ApiError refused(Endpoint endpoint, std::string_view body) {
  auto result = parse(endpoint, body);
  if (!std::holds_alternative<ApiError>(result)) {
    ADD_FAILURE() << "accepted " << body;
    return {};
  }
  return std::get<ApiError>(result);
}

// A chat body with one user message, and `extra` fields after it.
std::string chat_body(std::string_view extra = {}) {
  std::string body = R"({"messages":[{"role":"user","content":"hi"}])";
  if (!extra.empty()) {
    body += ',';
    body += extra;
  }
  return body + "}";
}

std::string completion_body(std::string_view extra = {}) {
  std::string body = R"({"prompt":"Once upon a time")";
  if (!extra.empty()) {
    body += ',';
    body += extra;
  }
  return body + "}";
}

CompletionRequest chat_with(std::string_view extra) { return accepted(Endpoint::chat, chat_body(extra)); }
ApiError chat_refusing(std::string_view extra) { return refused(Endpoint::chat, chat_body(extra)); }
CompletionRequest completion_with(std::string_view extra) {
  return accepted(Endpoint::completion, completion_body(extra));
}
ApiError completion_refusing(std::string_view extra) { return refused(Endpoint::completion, completion_body(extra)); }

// Checks the error's status, type, code and param.
#define EXPECT_API_ERROR(error_expr, expected_code, expected_param) \
  do {                                                              \
    const ApiError e_ = (error_expr);                               \
    EXPECT_EQ(e_.status, 400);                                      \
    EXPECT_EQ(e_.type, "invalid_request_error");                    \
    EXPECT_EQ(e_.code, expected_code) << e_.message;                \
    EXPECT_EQ(e_.param, expected_param) << e_.message;              \
    EXPECT_FALSE(e_.message.empty());                               \
  } while (0)

// --- Defaults and the basic shapes -------------------------------------------

TEST(OpenaiRequest, MinimalChatRequestGetsOpenAiDefaults) {
  const CompletionRequest r = accepted(Endpoint::chat, chat_body());
  EXPECT_EQ(r.endpoint, Endpoint::chat);
  EXPECT_EQ(r.model, "");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.sampler.top_p, 1.0f);
  EXPECT_EQ(r.sampler.top_k, 0);
  EXPECT_FLOAT_EQ(r.sampler.min_p, 0.0f);
  EXPECT_FLOAT_EQ(r.sampler.repeat_penalty, 1.0f);
  EXPECT_EQ(r.sampler.repeat_last_n, SamplerOptions().repeat_last_n);
  EXPECT_EQ(r.sampler.seed, kDefaultSeed);
  EXPECT_FALSE(r.seed_given);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.echo);
  EXPECT_EQ(r.user, "");
}

TEST(OpenaiRequest, MinimalCompletionRequestTakesThePromptString) {
  const CompletionRequest r = accepted(Endpoint::completion, completion_body());
  EXPECT_EQ(r.endpoint, Endpoint::completion);
  EXPECT_EQ(r.prompt, "Once upon a time");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_TRUE(r.prompt_tokens.empty());
  EXPECT_TRUE(r.messages.empty());
  EXPECT_FLOAT_EQ(r.sampler.temperature, 1.0f);
}

TEST(OpenaiRequest, ModelIsAStringAndNullMeansAbsent) {
  EXPECT_EQ(chat_with(R"("model":"kjv-tiny")").model, "kjv-tiny");
  EXPECT_EQ(chat_with(R"("model":null)").model, "");
  EXPECT_API_ERROR(chat_refusing(R"("model":7)"), "invalid_type", "model");
}

TEST(OpenaiRequest, UnknownFieldsAreIgnored) {
  const CompletionRequest r = chat_with(R"("metadata":{"a":1},"store":true,"tool_choice":"none","x_custom":[1,2])");
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(OpenaiRequest, EachEndpointIgnoresTheOthersInput) {
  EXPECT_TRUE(chat_with(R"("prompt":42)").prompt.empty());
  EXPECT_TRUE(completion_with(R"("messages":"not even an array")").messages.empty());
}

// --- Chat messages -----------------------------------------------------------

TEST(OpenaiRequest, MessagesKeepTheirRolesAndContentInOrder) {
  const CompletionRequest r = accepted(Endpoint::chat, R"({"messages":[
      {"role":"system","content":"Be terse."},
      {"role":"user","content":"2+2?","name":"ann"},
      {"role":"assistant","content":"4"},
      {"role":"user","content":""}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be terse.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "2+2?");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "4");
  EXPECT_EQ(r.messages[3].content, "");
}

TEST(OpenaiRequest, TextContentPartsAreJoinedWithNewlines) {
  const CompletionRequest r = accepted(Endpoint::chat, R"({"messages":[{"role":"user","content":[
      {"type":"text","text":"first"},{"type":"text","text":"second"}]}]})");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "first\nsecond");
}

TEST(OpenaiRequest, AnEmptyContentPartListIsEmptyContent) {
  const CompletionRequest r = accepted(Endpoint::chat, R"({"messages":[{"role":"user","content":[]}]})");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "");
}

TEST(OpenaiRequest, ContentPartsOtherThanTextAreUnsupported) {
  const ApiError e = refused(Endpoint::chat, R"({"messages":[{"role":"user","content":[
      {"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x"}}]}]})");
  EXPECT_API_ERROR(e, "unsupported_value", "messages[0].content[1].type");
  EXPECT_NE(e.message.find("image_url"), std::string::npos) << e.message;
}

TEST(OpenaiRequest, MalformedContentPartsNameThePart) {
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":["text"]}]})"), "invalid_type",
                   "messages[0].content[0]");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":[{"text":"a"}]}]})"),
                   "missing_field", "messages[0].content[0].type");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":1}]}]})"), "invalid_type",
                   "messages[0].content[0].type");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
                   "missing_field", "messages[0].content[0].text");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":[{"type":"text","text":5}]}]})"),
                   "invalid_type", "messages[0].content[0].text");
}

TEST(OpenaiRequest, ContentOfAnotherTypeIsInvalidType) {
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":42}]})"), "invalid_type",
                   "messages[0].content");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":{"text":"a"}}]})"), "invalid_type",
                   "messages[0].content");
}

TEST(OpenaiRequest, AnAssistantMessageMayHaveNoContent) {
  const CompletionRequest r = accepted(Endpoint::chat, R"({"messages":[{"role":"user","content":"a"},
      {"role":"assistant","content":null},{"role":"assistant"},{"role":"user","content":"b"}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[2].content, "");
}

TEST(OpenaiRequest, UserAndSystemMessagesNeedContent) {
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user"}]})"), "missing_field",
                   "messages[0].content");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"user","content":"a"},
      {"role":"system","content":null}]})"),
                   "missing_field", "messages[1].content");
}

TEST(OpenaiRequest, RolesOtherThanSystemUserAssistantToolAreRefused) {
  for (const char* role : {"function", "developer", "User", ""}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":"a"},{"role":")") + role + R"(","content":"b"}]})";
    const ApiError e = refused(Endpoint::chat, body);
    EXPECT_API_ERROR(e, "invalid_value", "messages[1].role");
  }
}

TEST(OpenaiRequest, MessagesWithoutAStringRoleAreRefused) {
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"content":"a"}]})"), "missing_field", "messages[0].role");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":1,"content":"a"}]})"), "invalid_type",
                   "messages[0].role");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":["hi"]})"), "invalid_type", "messages[0]");
}

TEST(OpenaiRequest, MessagesMustBeANonEmptyArray) {
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"model":"m"})"), "missing_field", "messages");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":null})"), "missing_field", "messages");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":"hi"})"), "invalid_type", "messages");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[]})"), "invalid_value", "messages");
}

// --- Completion prompts ------------------------------------------------------

TEST(OpenaiRequest, PromptIsRequiredAndNotEmpty) {
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"model":"m"})"), "missing_field", "prompt");
  const ApiError empty = refused(Endpoint::completion, R"({"prompt":""})");
  EXPECT_API_ERROR(empty, "invalid_value", "prompt");
  EXPECT_EQ(empty.message, "'prompt' is empty");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[]})"), "invalid_value", "prompt");
}

TEST(OpenaiRequest, PromptOfAnotherTypeIsInvalidType) {
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":5})"), "invalid_type", "prompt");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":{"text":"a"}})"), "invalid_type", "prompt");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":true})"), "invalid_type", "prompt");
}

TEST(OpenaiRequest, PromptAsTokenIdsIsKeptAsTokens) {
  const CompletionRequest r = accepted(Endpoint::completion, R"({"prompt":[1, 0, 2147483647, 3.0]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 0, 2147483647, 3}));
  EXPECT_TRUE(r.prompt.empty());
}

TEST(OpenaiRequest, TokenIdsMustBeIntegersInInt32Range) {
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[1,-1]})"), "invalid_value", "prompt[1]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[2147483648]})"), "invalid_value", "prompt[0]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[1,2.5]})"), "invalid_type", "prompt[1]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[1,"two"]})"), "invalid_type", "prompt[1]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[1,null]})"), "invalid_type", "prompt[1]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[1,true]})"), "invalid_type", "prompt[1]");
}

TEST(OpenaiRequest, AListOfOneStringIsThatPrompt) {
  const CompletionRequest r = accepted(Endpoint::completion, R"({"prompt":["In the beginning"]})");
  EXPECT_FALSE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt, "In the beginning");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[""]})"), "invalid_value", "prompt[0]");
}

TEST(OpenaiRequest, AListOfOneTokenListIsThatPrompt) {
  const CompletionRequest r = accepted(Endpoint::completion, R"({"prompt":[[5,6,7]]})");
  EXPECT_TRUE(r.prompt_is_tokens);
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[["a"]]})"), "invalid_type", "prompt[0][0]");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[[]]})"), "invalid_value", "prompt[0]");
}

TEST(OpenaiRequest, BatchPromptsAreUnsupported) {
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":["a","b"]})"), "unsupported_value", "prompt");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":[[1],[2]]})"), "unsupported_value", "prompt");
}

// --- max_tokens ----------------------------------------------------------------

TEST(OpenaiRequest, MaxTokensIsAPositiveInteger) {
  EXPECT_EQ(chat_with(R"("max_tokens":16)").max_tokens, 16);
  EXPECT_EQ(chat_with(R"("max_tokens":1)").max_tokens, 1);
  EXPECT_EQ(chat_with(R"("max_tokens":16.0)").max_tokens, 16);
  EXPECT_EQ(chat_with(R"("max_tokens":null)").max_tokens, -1);
  EXPECT_EQ(chat_with(R"("max_tokens":9223372036854775807)").max_tokens, std::numeric_limits<int64_t>::max());
}

TEST(OpenaiRequest, MaxTokensOfZeroOrLessIsInvalidValue) {
  const ApiError zero = chat_refusing(R"("max_tokens":0)");
  EXPECT_API_ERROR(zero, "invalid_value", "max_tokens");
  EXPECT_NE(zero.message.find("'max_tokens'"), std::string::npos) << zero.message;
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":-5)"), "invalid_value", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":1e30)"), "invalid_value", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":18446744073709551615)"), "invalid_value", "max_tokens");
}

TEST(OpenaiRequest, MaxTokensThatIsNotAnIntegerIsInvalidType) {
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":2.5)"), "invalid_type", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":"10")"), "invalid_type", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":true)"), "invalid_type", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":[10])"), "invalid_type", "max_tokens");
}

TEST(OpenaiRequest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(chat_with(R"("max_completion_tokens":7)").max_tokens, 7);
  EXPECT_EQ(chat_with(R"("max_tokens":100,"max_completion_tokens":7)").max_tokens, 7);
  EXPECT_EQ(chat_with(R"("max_completion_tokens":7,"max_tokens":100)").max_tokens, 7);
  EXPECT_EQ(chat_with(R"("max_tokens":100,"max_completion_tokens":null)").max_tokens, 100);
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":100,"max_completion_tokens":0)"), "invalid_value",
                   "max_completion_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":0,"max_completion_tokens":5)"), "invalid_value", "max_tokens");
}

// --- Sampling ----------------------------------------------------------------

TEST(OpenaiRequest, TemperatureIsANumberFromZeroToTwo) {
  EXPECT_FLOAT_EQ(chat_with(R"("temperature":0)").sampler.temperature, 0.0f);
  EXPECT_FLOAT_EQ(chat_with(R"("temperature":0.7)").sampler.temperature, 0.7f);
  EXPECT_FLOAT_EQ(chat_with(R"("temperature":2)").sampler.temperature, 2.0f);
  EXPECT_FLOAT_EQ(chat_with(R"("temperature":null)").sampler.temperature, 1.0f);
  const ApiError high = chat_refusing(R"("temperature":2.01)");
  EXPECT_API_ERROR(high, "invalid_value", "temperature");
  EXPECT_EQ(high.message, "'temperature' must be a number between 0 and 2, not 2.01");
  EXPECT_API_ERROR(chat_refusing(R"("temperature":-0.1)"), "invalid_value", "temperature");
  EXPECT_API_ERROR(chat_refusing(R"("temperature":"0.5")"), "invalid_type", "temperature");
  EXPECT_API_ERROR(chat_refusing(R"("temperature":false)"), "invalid_type", "temperature");
}

TEST(OpenaiRequest, TopPIsAboveZeroAndAtMostOne) {
  EXPECT_FLOAT_EQ(chat_with(R"("top_p":0.9)").sampler.top_p, 0.9f);
  EXPECT_FLOAT_EQ(chat_with(R"("top_p":1)").sampler.top_p, 1.0f);
  EXPECT_API_ERROR(chat_refusing(R"("top_p":0)"), "invalid_value", "top_p");
  EXPECT_API_ERROR(chat_refusing(R"("top_p":1.5)"), "invalid_value", "top_p");
  EXPECT_API_ERROR(chat_refusing(R"("top_p":"all")"), "invalid_type", "top_p");
}

TEST(OpenaiRequest, TopPTooSmallForTheSamplerIsRefused) {
  // Above 0 as a double, 0 as the sampler's float: the sampler's own check refuses it.
  const ApiError e = chat_refusing(R"("top_p":1e-50)");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "invalid_value");
  EXPECT_NE(e.message.find("top_p"), std::string::npos) << e.message;
}

TEST(OpenaiRequest, TopKIsANonNegativeInteger) {
  EXPECT_EQ(chat_with(R"("top_k":40)").sampler.top_k, 40);
  EXPECT_EQ(chat_with(R"("top_k":0)").sampler.top_k, 0);
  EXPECT_API_ERROR(chat_refusing(R"("top_k":-1)"), "invalid_value", "top_k");
  EXPECT_API_ERROR(chat_refusing(R"("top_k":3000000000)"), "invalid_value", "top_k");
  EXPECT_API_ERROR(chat_refusing(R"("top_k":2.5)"), "invalid_type", "top_k");
  EXPECT_API_ERROR(chat_refusing(R"("top_k":"40")"), "invalid_type", "top_k");
}

TEST(OpenaiRequest, MinPIsFromZeroToOne) {
  EXPECT_FLOAT_EQ(chat_with(R"("min_p":0.05)").sampler.min_p, 0.05f);
  EXPECT_FLOAT_EQ(chat_with(R"("min_p":1)").sampler.min_p, 1.0f);
  EXPECT_API_ERROR(chat_refusing(R"("min_p":1.1)"), "invalid_value", "min_p");
  EXPECT_API_ERROR(chat_refusing(R"("min_p":-0.5)"), "invalid_value", "min_p");
  EXPECT_API_ERROR(chat_refusing(R"("min_p":{})"), "invalid_type", "min_p");
}

TEST(OpenaiRequest, SeedIsAnyInt64KeptAsItsBitPattern) {
  const CompletionRequest r = chat_with(R"("seed":42)");
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampler.seed, 42u);
  EXPECT_EQ(chat_with(R"("seed":-1)").sampler.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(chat_with(R"("seed":-9223372036854775808)").sampler.seed, uint64_t{1} << 63);
  EXPECT_EQ(chat_with(R"("seed":9223372036854775807)").sampler.seed, (uint64_t{1} << 63) - 1);
  EXPECT_EQ(chat_with(R"("seed":0)").sampler.seed, 0u);
  EXPECT_TRUE(chat_with(R"("seed":0)").seed_given);
}

TEST(OpenaiRequest, WithoutASeedTheDefaultSeedIsUsed) {
  const CompletionRequest r = chat_with(R"("seed":null)");
  EXPECT_FALSE(r.seed_given);
  EXPECT_EQ(r.sampler.seed, kDefaultSeed);
  auto other = parse_completion_request(Endpoint::chat, chat_body(), 99);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(other));
  EXPECT_EQ(std::get<CompletionRequest>(other).sampler.seed, 99u);
}

TEST(OpenaiRequest, SeedOutsideInt64OrNotAnIntegerIsRefused) {
  EXPECT_API_ERROR(chat_refusing(R"("seed":18446744073709551615)"), "invalid_value", "seed");
  EXPECT_API_ERROR(chat_refusing(R"("seed":-9223372036854775809)"), "invalid_value", "seed");
  EXPECT_API_ERROR(chat_refusing(R"("seed":1.5)"), "invalid_type", "seed");
  EXPECT_API_ERROR(chat_refusing(R"("seed":"42")"), "invalid_type", "seed");
}

TEST(OpenaiRequest, RepeatPenaltyGoesByEitherName) {
  EXPECT_FLOAT_EQ(chat_with(R"("repeat_penalty":1.1)").sampler.repeat_penalty, 1.1f);
  EXPECT_FLOAT_EQ(chat_with(R"("repetition_penalty":1.3)").sampler.repeat_penalty, 1.3f);
  EXPECT_FLOAT_EQ(chat_with(R"("repeat_penalty":1.2,"repetition_penalty":1.2)").sampler.repeat_penalty, 1.2f);
  EXPECT_FLOAT_EQ(chat_with(R"("repeat_penalty":0.5)").sampler.repeat_penalty, 0.5f);
}

TEST(OpenaiRequest, RepeatPenaltyMustBePositiveAndAgreeAcrossNames) {
  EXPECT_API_ERROR(chat_refusing(R"("repeat_penalty":0)"), "invalid_value", "repeat_penalty");
  EXPECT_API_ERROR(chat_refusing(R"("repetition_penalty":-1)"), "invalid_value", "repetition_penalty");
  EXPECT_API_ERROR(chat_refusing(R"("repeat_penalty":"1.1")"), "invalid_type", "repeat_penalty");
  EXPECT_API_ERROR(chat_refusing(R"("repeat_penalty":1.1,"repetition_penalty":1.2)"), "invalid_value",
                   "repetition_penalty");
}

TEST(OpenaiRequest, FrequencyAndPresencePenaltiesGoToTheSampler) {
  const CompletionRequest r = chat_with(R"("frequency_penalty":2,"presence_penalty":-1.5)");
  EXPECT_FLOAT_EQ(r.sampler.repeat_penalty, 1.0f);
  EXPECT_FLOAT_EQ(r.sampler.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampler.presence_penalty, -1.5f);
  EXPECT_TRUE(r.sampler.adjusts_logits());
  EXPECT_FALSE(chat_with("").sampler.adjusts_logits());
  EXPECT_API_ERROR(chat_refusing(R"("frequency_penalty":2.5)"), "invalid_value", "frequency_penalty");
  EXPECT_API_ERROR(chat_refusing(R"("presence_penalty":-3)"), "invalid_value", "presence_penalty");
  EXPECT_API_ERROR(chat_refusing(R"("presence_penalty":"0")"), "invalid_type", "presence_penalty");
}

// --- Stop strings --------------------------------------------------------------

TEST(OpenaiRequest, StopAsAStringIsOneStopString) {
  EXPECT_EQ(chat_with(R"("stop":"\n\n")").stop, (std::vector<std::string>{"\n\n"}));
}

TEST(OpenaiRequest, StopAsAListKeepsUpToFourStrings) {
  EXPECT_EQ(chat_with(R"("stop":["a","bb","ccc","dddd"])").stop, (std::vector<std::string>{"a", "bb", "ccc", "dddd"}));
  EXPECT_TRUE(chat_with(R"("stop":[])").stop.empty());
  EXPECT_TRUE(chat_with(R"("stop":null)").stop.empty());
}

TEST(OpenaiRequest, FiveStopStringsAreTooMany) {
  const ApiError e = chat_refusing(R"("stop":["a","b","c","d","e"])");
  EXPECT_API_ERROR(e, "invalid_value", "stop");
  EXPECT_NE(e.message.find('4'), std::string::npos) << e.message;
}

TEST(OpenaiRequest, StopStringsMustBeNonEmptyStrings) {
  EXPECT_API_ERROR(chat_refusing(R"("stop":"")"), "invalid_value", "stop");
  EXPECT_API_ERROR(chat_refusing(R"("stop":["a",""])"), "invalid_value", "stop[1]");
  EXPECT_API_ERROR(chat_refusing(R"("stop":["a",3])"), "invalid_type", "stop[1]");
  EXPECT_API_ERROR(chat_refusing(R"("stop":3)"), "invalid_type", "stop");
  EXPECT_API_ERROR(chat_refusing(R"("stop":{"a":1})"), "invalid_type", "stop");
}

// --- Streaming -----------------------------------------------------------------

TEST(OpenaiRequest, StreamIsABoolean) {
  EXPECT_TRUE(chat_with(R"("stream":true)").stream);
  EXPECT_FALSE(chat_with(R"("stream":false)").stream);
  EXPECT_FALSE(chat_with(R"("stream":null)").stream);
  EXPECT_API_ERROR(chat_refusing(R"("stream":"yes")"), "invalid_type", "stream");
  EXPECT_API_ERROR(chat_refusing(R"("stream":1)"), "invalid_type", "stream");
}

TEST(OpenaiRequest, IncludeUsageCountsOnlyWhenStreaming) {
  EXPECT_TRUE(chat_with(R"("stream":true,"stream_options":{"include_usage":true})").include_usage);
  EXPECT_FALSE(chat_with(R"("stream":true,"stream_options":{"include_usage":false})").include_usage);
  EXPECT_FALSE(chat_with(R"("stream":true,"stream_options":{})").include_usage);
  EXPECT_FALSE(chat_with(R"("stream":false,"stream_options":{"include_usage":true})").include_usage);
  EXPECT_FALSE(chat_with(R"("stream_options":{"include_usage":true})").include_usage);
  EXPECT_FALSE(chat_with(R"("stream":true,"stream_options":null)").include_usage);
}

TEST(OpenaiRequest, StreamOptionsOfTheWrongTypeAreRefused) {
  EXPECT_API_ERROR(chat_refusing(R"("stream":true,"stream_options":true)"), "invalid_type", "stream_options");
  EXPECT_API_ERROR(chat_refusing(R"("stream":true,"stream_options":{"include_usage":"yes"})"), "invalid_type",
                   "stream_options.include_usage");
}

// --- Features refused by name --------------------------------------------------

TEST(OpenaiRequest, NIsFrom1To16) {
  EXPECT_EQ(chat_with(R"("n":1)").n, 1);
  EXPECT_EQ(chat_with(R"("n":null)").n, 1);
  EXPECT_EQ(chat_with("").n, 1);
  EXPECT_EQ(chat_with(R"("n":3)").n, 3);
  EXPECT_EQ(completion_with(R"("n":16)").n, 16);
  EXPECT_API_ERROR(chat_refusing(R"("n":17)"), "invalid_value", "n");
  EXPECT_API_ERROR(chat_refusing(R"("n":0)"), "invalid_value", "n");
  EXPECT_API_ERROR(chat_refusing(R"("n":"1")"), "invalid_type", "n");
}

TEST(OpenaiRequest, LogprobsAsChatAndCompletionsSpellThem) {
  EXPECT_EQ(chat_with(R"("logprobs":false)").top_logprobs, -1);
  EXPECT_EQ(chat_with(R"("logprobs":null,"top_logprobs":0)").top_logprobs, -1);
  EXPECT_EQ(chat_with("").top_logprobs, -1);
  EXPECT_EQ(chat_with(R"("logprobs":true)").top_logprobs, 0);
  EXPECT_EQ(chat_with(R"("logprobs":true,"top_logprobs":20)").top_logprobs, 20);
  EXPECT_EQ(completion_with(R"("logprobs":0)").top_logprobs, 0);
  EXPECT_EQ(completion_with(R"("logprobs":5)").top_logprobs, 5);
  EXPECT_EQ(completion_with(R"("logprobs":null)").top_logprobs, -1);
  EXPECT_API_ERROR(chat_refusing(R"("logprobs":"yes")"), "invalid_type", "logprobs");
  EXPECT_API_ERROR(chat_refusing(R"("logprobs":1)"), "invalid_type", "logprobs");
  EXPECT_API_ERROR(chat_refusing(R"("top_logprobs":3)"), "invalid_value", "top_logprobs");
  EXPECT_API_ERROR(chat_refusing(R"("logprobs":true,"top_logprobs":21)"), "invalid_value", "top_logprobs");
  EXPECT_API_ERROR(chat_refusing(R"("top_logprobs":-1)"), "invalid_value", "top_logprobs");
  EXPECT_API_ERROR(completion_refusing(R"("logprobs":6)"), "invalid_value", "logprobs");
  EXPECT_API_ERROR(completion_refusing(R"("logprobs":true)"), "invalid_type", "logprobs");
  EXPECT_API_ERROR(completion_refusing(R"("logprobs":1,"top_logprobs":1)"), "unsupported_parameter", "top_logprobs");
}

TEST(OpenaiRequest, ToolsAreReadWithTheirSchemaInTheRequestsOrder) {
  const CompletionRequest r = chat_with(
      R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":)"
      R"({"type":"object","properties":{"zone":{"type":"string"},"city":{"type":"string"}},"required":["city"]}}},)"
      R"({"type":"function","function":{"name":"now"}}])");
  ASSERT_EQ(r.tools.size(), 2u);
  EXPECT_EQ(r.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools[0].description, "d");
  // The keys keep their order ("zone" before "city"), which templates print.
  EXPECT_LT(r.tools[0].parameters.find("zone"), r.tools[0].parameters.find("city")) << r.tools[0].parameters;
  EXPECT_LT(r.tools[0].tool_json.find("name"), r.tools[0].tool_json.find("description")) << r.tools[0].tool_json;
  EXPECT_EQ(r.tools[1].parameters, "{}");
  EXPECT_EQ(r.tool_choice, ToolChoice::automatic);
  EXPECT_TRUE(r.parallel_tool_calls);
  EXPECT_EQ(chat_with(R"("tools":[])").tool_choice, ToolChoice::none);
}

TEST(OpenaiRequest, ToolChoiceNoneAutoRequiredOrANamedFunction) {
  const std::string tools = R"("tools":[{"type":"function","function":{"name":"f"}}],)";
  EXPECT_EQ(chat_with(tools + R"("tool_choice":"none")").tool_choice, ToolChoice::none);
  EXPECT_EQ(chat_with(tools + R"("tool_choice":"auto")").tool_choice, ToolChoice::automatic);
  EXPECT_EQ(chat_with(tools + R"("tool_choice":"required")").tool_choice, ToolChoice::required);
  const CompletionRequest named = chat_with(tools + R"("tool_choice":{"type":"function","function":{"name":"f"}})");
  EXPECT_EQ(named.tool_choice, ToolChoice::function);
  EXPECT_EQ(named.tool_choice_name, "f");
  EXPECT_FALSE(chat_with(tools + R"("parallel_tool_calls":false)").parallel_tool_calls);
  EXPECT_API_ERROR(chat_refusing(tools + R"("tool_choice":{"type":"function","function":{"name":"g"}})"),
                   "invalid_value", "tool_choice.function.name");
  EXPECT_API_ERROR(chat_refusing(tools + R"("tool_choice":"always")"), "invalid_value", "tool_choice");
  EXPECT_API_ERROR(chat_refusing(R"("tool_choice":"required")"), "invalid_value", "tool_choice");
  EXPECT_API_ERROR(chat_refusing(tools + R"("parallel_tool_calls":"yes")"), "invalid_type", "parallel_tool_calls");
}

TEST(OpenaiRequest, BadToolsAreRefusedNamingTheField) {
  EXPECT_API_ERROR(chat_refusing(R"("tools":{"type":"function"})"), "invalid_type", "tools");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"retrieval"}])"), "unsupported_value", "tools[0].type");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"function"}])"), "missing_field", "tools[0].function");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"function","function":{"name":"a b"}}])"), "invalid_value",
                   "tools[0].function.name");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"function","function":{"name":"f","parameters":[]}}])"),
                   "invalid_type", "tools[0].function.parameters");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"function","function":{"name":"f"}},)"
                                 R"({"type":"function","function":{"name":"f"}}])"),
                   "invalid_value", "tools[1].function.name");
  EXPECT_API_ERROR(chat_refusing(R"("functions":[{"name":"f"}])"), "unsupported_parameter", "functions");
  EXPECT_API_ERROR(chat_refusing(R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                                 R"("response_format":{"type":"json_object"})"),
                   "unsupported_parameter", "response_format");
  EXPECT_API_ERROR(refused(Endpoint::completion, R"({"prompt":"a","tools":[]})"), "unsupported_parameter", "tools");
}

TEST(OpenaiRequest, ToolCallsAndToolResultsInMessages) {
  const CompletionRequest r = accepted(
      Endpoint::chat, R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null,"tool_calls":[)"
                      R"({"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},)"
                      R"({"role":"tool","tool_call_id":"call_1","content":"42"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"x\":1}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].content, "42");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"tool","content":"42"}]})"), "missing_field",
                   "messages[0].tool_call_id");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c"}]}]})"),
                   "missing_field", "messages[0].tool_calls[0].function");
  EXPECT_API_ERROR(refused(Endpoint::chat, R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c",)"
                                           R"("function":{"name":"f","arguments":1}}]}]})"),
                   "invalid_type", "messages[0].tool_calls[0].function.arguments");
}

TEST(OpenaiRequest, ResponseFormatTextJsonObjectOrASchemaTurnedIntoAGrammar) {
  chat_with(R"("response_format":{"type":"text"})");
  chat_with(R"("response_format":null)");
  EXPECT_TRUE(chat_with(R"("response_format":{"type":"text"})").grammar.empty());
  EXPECT_FALSE(chat_with(R"("response_format":{"type":"json_object"})").grammar.empty());
  const CompletionRequest schema =
      chat_with(R"("response_format":{"type":"json_schema","json_schema":{"name":"v","schema":{"type":"object",)"
                R"("properties":{"book":{"enum":["Genesis","Exodus"]}},"required":["book"]}}})");
  EXPECT_NE(schema.grammar.find("Genesis"), std::string::npos) << schema.grammar;
  EXPECT_API_ERROR(chat_refusing(R"("response_format":{"type":"json_schema","json_schema":{}})"), "missing_field",
                   "response_format.json_schema.schema");
  const ApiError unknown = chat_refusing(
      R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","patternProperties":{}}}})");
  EXPECT_API_ERROR(unknown, "invalid_value", "response_format.json_schema.schema");
  EXPECT_NE(unknown.message.find("patternProperties"), std::string::npos) << unknown.message;
  EXPECT_API_ERROR(chat_refusing(R"("response_format":{"type":"xml"})"), "unsupported_value", "response_format.type");
  EXPECT_API_ERROR(chat_refusing(R"("response_format":{})"), "missing_field", "response_format.type");
  EXPECT_API_ERROR(chat_refusing(R"("response_format":{"type":1})"), "invalid_type", "response_format.type");
  EXPECT_API_ERROR(chat_refusing(R"("response_format":"text")"), "invalid_type", "response_format");
}

TEST(OpenaiRequest, LogitBiasGoesToTheSamplerAndIsChecked) {
  EXPECT_TRUE(chat_with(R"("logit_bias":{})").sampler.logit_bias.empty());
  EXPECT_TRUE(chat_with(R"("logit_bias":null)").sampler.logit_bias.empty());
  const CompletionRequest r = chat_with(R"("logit_bias":{"50256":-100,"7":2.5})");
  ASSERT_EQ(r.sampler.logit_bias.size(), 2u);
  std::map<int32_t, float> bias(r.sampler.logit_bias.begin(), r.sampler.logit_bias.end());
  EXPECT_FLOAT_EQ(bias[50256], -100.0f);
  EXPECT_FLOAT_EQ(bias[7], 2.5f);
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":[1])"), "invalid_type", "logit_bias");
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":{"abc":1})"), "invalid_value", "logit_bias");
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":{"-1":1})"), "invalid_value", "logit_bias");
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":{"99999999999":1})"), "invalid_value", "logit_bias");
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":{"5":101})"), "invalid_value", "logit_bias.5");
  EXPECT_API_ERROR(chat_refusing(R"("logit_bias":{"5":"1"})"), "invalid_type", "logit_bias.5");
}

TEST(OpenaiRequest, CompletionEchoMustBeFalse) {
  EXPECT_FALSE(completion_with(R"("echo":false)").echo);
  EXPECT_API_ERROR(completion_refusing(R"("echo":true)"), "unsupported_value", "echo");
  EXPECT_API_ERROR(completion_refusing(R"("echo":"no")"), "invalid_type", "echo");
}

TEST(OpenaiRequest, CompletionSuffixAndBestOfAreUnsupported) {
  completion_with(R"("suffix":"","best_of":1)");
  EXPECT_API_ERROR(completion_refusing(R"("suffix":"end")"), "unsupported_parameter", "suffix");
  EXPECT_API_ERROR(completion_refusing(R"("suffix":1)"), "invalid_type", "suffix");
  EXPECT_API_ERROR(completion_refusing(R"("best_of":3)"), "unsupported_value", "best_of");
}

TEST(OpenaiRequest, UserIsKeptWhenAString) {
  EXPECT_EQ(chat_with(R"("user":"u-1")").user, "u-1");
  EXPECT_API_ERROR(chat_refusing(R"("user":12)"), "invalid_type", "user");
}

// --- Bodies that are not a JSON object -----------------------------------------

TEST(OpenaiRequest, TruncatedBodyIsInvalidJsonNamingWhereItStopped) {
  const ApiError e = refused(Endpoint::chat, R"({"messages":[{"role":"user")");
  EXPECT_API_ERROR(e, "invalid_json", "");
  EXPECT_NE(e.message.find("line 1, column"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("json.exception"), std::string::npos) << e.message;
}

TEST(OpenaiRequest, SyntaxErrorNamesItsLine) {
  const ApiError e = refused(Endpoint::chat, "{\n  \"messages\": [],\n  \"temperature\": 0.5,,\n}");
  EXPECT_API_ERROR(e, "invalid_json", "");
  EXPECT_NE(e.message.find("line 3"), std::string::npos) << e.message;
}

TEST(OpenaiRequest, EmptyBodyIsInvalidJson) {
  EXPECT_API_ERROR(refused(Endpoint::chat, ""), "invalid_json", "");
  EXPECT_API_ERROR(refused(Endpoint::completion, "   "), "invalid_json", "");
}

TEST(OpenaiRequest, JsonThatIsNotAnObjectIsInvalidJson) {
  for (const char* body : {"[1,2]", "\"hello\"", "42", "null", "true"}) {
    const ApiError e = refused(Endpoint::chat, body);
    EXPECT_API_ERROR(e, "invalid_json", "");
    EXPECT_NE(e.message.find("must be a JSON object"), std::string::npos) << body << ": " << e.message;
  }
}

TEST(OpenaiRequest, TrailingGarbageIsInvalidJson) {
  EXPECT_API_ERROR(refused(Endpoint::chat, chat_body() + " {}"), "invalid_json", "");
}

TEST(OpenaiRequest, NanAndInfinityLiteralsAreInvalidJson) {
  EXPECT_API_ERROR(chat_refusing(R"("temperature":NaN)"), "invalid_json", "");
  EXPECT_API_ERROR(chat_refusing(R"("temperature":Infinity)"), "invalid_json", "");
  EXPECT_API_ERROR(chat_refusing(R"("temperature":-Infinity)"), "invalid_json", "");
}

TEST(OpenaiRequest, NumbersBeyondDoubleAreInvalidJson) {
  EXPECT_API_ERROR(chat_refusing(R"("temperature":1e400)"), "invalid_json", "");
  EXPECT_API_ERROR(chat_refusing(R"("seed":-1e400)"), "invalid_json", "");
}

TEST(OpenaiRequest, HugeIntegersAreOutOfRangeNotWrapped) {
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":100000000000000000000000000000)"), "invalid_value", "max_tokens");
  EXPECT_API_ERROR(chat_refusing(R"("top_k":100000000000000000000000000000)"), "invalid_value", "top_k");
  EXPECT_API_ERROR(chat_refusing(R"("seed":100000000000000000000000000000)"), "invalid_value", "seed");
}

TEST(OpenaiRequest, WholeNumbersInFloatFormCountUpTo2To53) {
  EXPECT_EQ(chat_with(R"("seed":1e3)").sampler.seed, 1000u);
  EXPECT_EQ(chat_with(R"("seed":-9007199254740992.0)").sampler.seed, static_cast<uint64_t>(-9007199254740992));
  EXPECT_API_ERROR(chat_refusing(R"("seed":9007199254740994.0)"), "invalid_value", "seed");
  EXPECT_API_ERROR(chat_refusing(R"("max_tokens":1e17)"), "invalid_value", "max_tokens");
}

TEST(OpenaiRequest, InvalidUtf8InAStringIsInvalidJson) {
  EXPECT_API_ERROR(refused(Endpoint::chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\"}]}"),
                   "invalid_json", "");
}

TEST(OpenaiRequest, DeeplyNestedArraysAreRefusedWithoutRecursion) {
  // 100000 levels would overflow the stack of a recursive parser or destructor.
  const std::string body = std::string(100000, '[') + std::string(100000, ']');
  const ApiError e = refused(Endpoint::chat, body);
  EXPECT_API_ERROR(e, "invalid_json", "");
  EXPECT_NE(e.message.find(std::to_string(kMaxJsonDepth)), std::string::npos) << e.message;
  const std::string unclosed = "{\"messages\":" + std::string(100000, '[');
  EXPECT_API_ERROR(refused(Endpoint::chat, unclosed), "invalid_json", "");
  std::string objects;
  for (int i = 0; i < 100000; ++i) objects += "{\"a\":";
  EXPECT_API_ERROR(refused(Endpoint::chat, objects), "invalid_json", "");
}

TEST(OpenaiRequest, NestingUpToTheLimitIsAccepted) {
  // The body's object is one level; an ignored field takes the rest.
  const size_t inner = kMaxJsonDepth - 1;
  const std::string at_limit = chat_body("\"extra\":" + std::string(inner, '[') + std::string(inner, ']'));
  accepted(Endpoint::chat, at_limit);
  const std::string over_limit = chat_body("\"extra\":" + std::string(inner + 1, '[') + std::string(inner + 1, ']'));
  EXPECT_API_ERROR(refused(Endpoint::chat, over_limit), "invalid_json", "");
}

TEST(OpenaiRequest, BracketsInsideStringsDoNotCountAsNesting) {
  const std::string brackets = std::string(1000, '[') + "\\\"{{{" + std::string(1000, '{');
  const CompletionRequest r = accepted(Endpoint::completion, "{\"prompt\":\"" + brackets + "\"}");
  EXPECT_EQ(r.prompt.size(), 2004u);
}

}  // namespace
}  // namespace tensorpc::serve
