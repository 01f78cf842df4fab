// ChatSession on the bundled BPE chat model: a second turn evaluates only
// its own tokens and replies exactly as a session given the whole
// conversation at once; cancelling, a full context and bad conversations.
#include "model/runtime/chat_session.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "model/arch/llama_model.h"
#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"

namespace tensorpc {
namespace {

const std::string kModel = std::string(TENSORPC_SOURCE_DIR) + "/models/kjv-bpe.gguf";

// The bundled chat model placed on a local CPU device, and a generator over it.
struct ChatModel {
  explicit ChatModel(int64_t n_ctx) {
    auto m = LlamaModel::open(kModel, {.digest_dir = "off"});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return;
    model = std::move(m).value();
    PlacementOptions o;
    o.n_ctx = n_ctx;
    auto p = ModelPlacement::create(*model, {&cpu}, o);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return;
    placement = std::move(p).value();
    gen = std::make_unique<Generator>(*model, *placement);
  }
  ChatTemplate chat_template() const {
    const Tokenizer& tok = model->tokenizer();
    auto text = model->file().get_string("tokenizer.chat_template");
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    return ChatTemplate::detect(text.value(), tok.text(tok.bos()), tok.text(tok.eos())).value();
  }
  CpuDevice cpu{CpuDeviceOptions{.threads = 2}};
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<ModelPlacement> placement;
  std::unique_ptr<Generator> gen;
};

ChatSessionOptions greedy(int64_t n_predict) {
  ChatSessionOptions o;
  o.sampler.temperature = 0;
  o.n_predict = n_predict;
  return o;
}

class ChatSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " is absent (tools/train/make_bpe_model.sh makes it)";
  }
};

TEST_F(ChatSessionTest, TheModelsTemplateIsRecognised) {
  ChatModel m(256);
  ASSERT_TRUE(m.gen);
  EXPECT_EQ(m.chat_template().name(), "llama3");
}

TEST_F(ChatSessionTest, ASecondTurnEvaluatesOnlyItsOwnTokensAndRepliesAsTheWholeConversationWould) {
  ChatModel m(256);
  ASSERT_TRUE(m.gen);
  auto session = ChatSession::create(*m.gen, m.chat_template(), greedy(24));
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  auto first = session.value().reply("In the beginning God created the heaven and the earth.");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_GT(first.value().generated, 0);
  EXPECT_EQ(first.value().dropped_messages, 0);
  const int64_t cached = session.value().cached_tokens();
  // The cache holds the conversation and every reply token but the last
  // sampled (an end of turn is sampled, not counted, and not evaluated).
  const int64_t unfed = first.value().stop == ChatStop::end_of_turn ? 0 : 1;
  EXPECT_EQ(first.value().evaluated + first.value().generated - unfed, cached);

  auto second = session.value().reply("And God said, Let there be light.");
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  const std::vector<ChatMessage> conversation = session.value().messages();
  ASSERT_EQ(conversation.size(), 4u);
  EXPECT_EQ(conversation[1].content, first.value().text);
  EXPECT_EQ(conversation[3].content, second.value().text);

  // Only the end of the first reply, the message and the reply's header:
  // far fewer tokens than the conversation so far.
  const Tokenizer& tok = m.model->tokenizer();
  const size_t message_tokens = tok.encode("And God said, Let there be light.", false).size();
  EXPECT_LT(second.value().evaluated, cached);
  EXPECT_LE(second.value().evaluated, static_cast<int64_t>(message_tokens) + 12);
  EXPECT_GT(second.value().evaluated, static_cast<int64_t>(message_tokens));

  // A fresh session given the conversation at once evaluates all of it and
  // replies the same, token for token.
  ChatModel fresh_model(256);
  ASSERT_TRUE(fresh_model.gen);
  auto fresh = ChatSession::create(*fresh_model.gen, fresh_model.chat_template(), greedy(24));
  ASSERT_TRUE(fresh.ok());
  std::vector<ChatMessage> history(conversation.begin(), conversation.begin() + 3);
  auto again = fresh.value().respond(history);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again.value().text, second.value().text);
  EXPECT_GT(again.value().evaluated, cached);
}

TEST_F(ChatSessionTest, ACancelledReplyStopsAndTheConversationGoesOn) {
  ChatModel m(256);
  ASSERT_TRUE(m.gen);
  auto session = ChatSession::create(*m.gen, m.chat_template(), greedy(0));
  ASSERT_TRUE(session.ok());
  std::atomic<bool> cancel{false};
  int pieces = 0;
  auto turn = session.value().reply(
      "And the earth was without form, and void.",
      [&](std::string_view) {
        if (++pieces == 3) cancel.store(true);  // Ctrl-C while the reply streams
      },
      &cancel);
  ASSERT_TRUE(turn.ok()) << turn.status().to_string();
  EXPECT_EQ(turn.value().stop, ChatStop::cancelled);
  EXPECT_LE(turn.value().generated, 4);
  cancel.store(false);
  auto next = session.value().reply("And God saw the light, that it was good.");
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  EXPECT_EQ(session.value().messages().size(), 4u);
}

TEST_F(ChatSessionTest, AFullContextDropsTheOldestTurnsAndKeepsTheSystemPrompt) {
  ChatModel m(128);
  ASSERT_TRUE(m.gen);
  ChatSessionOptions o = greedy(16);
  o.system_prompt = "Answer with a verse.";
  o.reply_room = 24;
  auto session = ChatSession::create(*m.gen, m.chat_template(), o);
  ASSERT_TRUE(session.ok());
  int64_t dropped = 0;
  for (int i = 0; i < 8; ++i) {
    auto turn = session.value().reply("And the evening and the morning were the day number " + std::to_string(i) + ".");
    ASSERT_TRUE(turn.ok()) << "turn " << i << ": " << turn.status().to_string();
    dropped += turn.value().dropped_messages;
    EXPECT_LE(session.value().cached_tokens(), 128);
  }
  EXPECT_GT(dropped, 0);
  ASSERT_FALSE(session.value().messages().empty());
  EXPECT_EQ(session.value().messages().front().role, "system");
  EXPECT_EQ(session.value().messages().front().content, "Answer with a verse.");
  EXPECT_EQ(session.value().messages()[1].role, "user");

  // A message that cannot fit even alone is an error; the session stays usable.
  std::string huge;
  for (int i = 0; i < 100; ++i) huge += "And it was so. ";
  auto too_long = session.value().reply(huge);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::invalid_argument);
  EXPECT_TRUE(session.value().reply("Amen.").ok());
}

TEST_F(ChatSessionTest, AConversationThatDoesNotEndWithTheUserIsRefused) {
  ChatModel m(256);
  ASSERT_TRUE(m.gen);
  auto session = ChatSession::create(*m.gen, m.chat_template(), greedy(4));
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(session.value().respond({}).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(session.value().respond({{"user", "a"}, {"assistant", "b"}}).status().code(),
            StatusCode::invalid_argument);
  EXPECT_EQ(session.value().respond({{"narrator", "a"}, {"user", "b"}}).status().code(),
            StatusCode::invalid_argument);
  EXPECT_TRUE(session.value().respond({{"user", "Amen."}}).ok());
}

}  // namespace
}  // namespace tensorpc
