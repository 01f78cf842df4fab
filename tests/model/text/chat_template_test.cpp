// Chat templates (chat_template.h): each family is recognised from a real
// published template (tests/data/chat_templates: Qwen 2 and Phi-3 from the
// shared vocabularies, the others as the models publish them) and renders a
// fixed conversation to exactly what jinja2 makes of that template. The
// expected texts were printed by tools/chat_template_reference.py, which
// renders the templates with jinja2 the way transformers does.
//
// Llama 3.1 (llama3.1.jinja), 3.2 (llama3.2.jinja, the 1B and 3B Instruct
// template) and 3.3 (llama3.3.jinja) are the published texts; 3.2's dates its
// system block with the day of rendering, which the tests fix to kToday, the
// date the reference script gives its strftime_now.
#include "model/text/chat_template.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "model/text/chat_templates_testing.h"

namespace tensorpc {
namespace {

using test::read_template;

// The conversations of tools/chat_template_reference.py.
const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are a terse assistant."},
    {"user", "What is 2+2?"},
    {"assistant", " 4. \n"},
    {"user", "And 3+3?"},
};
const std::vector<ChatMessage> kWithoutSystem(kWithSystem.begin() + 1, kWithSystem.end());

// "Today" for Llama 3.2's template, as tools/chat_template_reference.py fixes it.
constexpr const char* kToday = "05 Mar 2025";

struct Expected {
  std::string file;  // in tests/data/chat_templates
  std::string family;
  std::string bos, eos;     // the vocabulary's texts
  std::string with_system;  // empty: the template refuses a system message
  std::string without_system;
};

const std::vector<Expected>& expected() {
  static const std::vector<Expected> cases = {
      {"chatml.jinja", "chatml", "<|endoftext|>", "<|endoftext|>",
       "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
       "<|im_start|>assistant\n 4. \n<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
       "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
       "<|im_start|>assistant\n 4. \n<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
      {"chatml-openhermes.jinja", "chatml", "<s>", "<|im_end|>",
       "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
       "<|im_start|>assistant\n 4. \n<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n",
       "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n 4. \n<|im_end|>\n<|im_start|>user\n"
       "And 3+3?<|im_end|>\n<|im_start|>assistant\n"},
      {"llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a terse assistant.<|eot_id|>"
       "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant"
       "<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>"
       "assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"llama3.1.jinja", "llama3.1", "<|begin_of_text|>", "<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 26 Jul 2024\n\nYou are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user"
       "<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "And 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"llama3.2.jinja", "llama3.1", "<|begin_of_text|>", "<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 05 Mar 2025\n\nYou are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user"
       "<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 05 Mar 2025\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "And 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"llama3.3.jinja", "llama3.1", "<|begin_of_text|>", "<|eot_id|>",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 26 Jul 2024\n\nYou are a terse assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "What is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user"
       "<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
       "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
       "<|start_header_id|>assistant<|end_header_id|>\n\n4.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "And 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"llama2.jinja", "llama2", "<s>", "</s>",
       "<s>[INST] <<SYS>>\nYou are a terse assistant.\n<</SYS>>\n\nWhat is 2+2? [/INST] 4. </s><s>[INST] And 3+3? "
       "[/INST]",
       "<s>[INST] What is 2+2? [/INST] 4. </s><s>[INST] And 3+3? [/INST]"},
      {"mistral-v0.jinja", "mistral-v0", "<s>", "</s>", "",
       "<s>[INST] What is 2+2? [/INST] 4. \n</s>[INST] And 3+3? [/INST]"},
      {"mistral-v1.jinja", "mistral-v1", "<s>", "</s>",
       "<s> [INST] You are a terse assistant.\n\nWhat is 2+2? [/INST]  4. \n</s> [INST] And 3+3? [/INST]",
       "<s> [INST] What is 2+2? [/INST]  4. \n</s> [INST] And 3+3? [/INST]"},
      {"mistral-v3.jinja", "mistral-v3", "<s>", "</s>",
       "<s>[INST] What is 2+2?[/INST] 4.</s>[INST] You are a terse assistant.\n\nAnd 3+3?[/INST]",
       "<s>[INST] What is 2+2?[/INST] 4.</s>[INST] And 3+3?[/INST]"},
      {"mistral-v3-tekken.jinja", "mistral-v3-tekken", "<s>", "</s>",
       "<s>[INST]What is 2+2?[/INST] 4. \n</s>[INST]You are a terse assistant.\n\nAnd 3+3?[/INST]",
       "<s>[INST]What is 2+2?[/INST] 4. \n</s>[INST]And 3+3?[/INST]"},
      {"mistral-v7.jinja", "mistral-v7", "<s>", "</s>",
       "<s>[SYSTEM_PROMPT] You are a terse assistant.[/SYSTEM_PROMPT][INST] What is 2+2?[/INST]  4. \n</s>"
       "[INST] And 3+3?[/INST]",
       "<s>[INST] What is 2+2?[/INST]  4. \n</s>[INST] And 3+3?[/INST]"},
      // Phi-3 mini's template drops the system message.
      {"phi3.jinja", "phi3", "<s>", "<|endoftext|>",
       "<s><|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n 4. \n<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n",
       "<s><|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n 4. \n<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n"},
      {"phi3-small.jinja", "phi3-small", "<|endoftext|>", "<|endoftext|>",
       "<|endoftext|><|system|>\nYou are a terse assistant.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n"
       " 4. \n<|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n",
       "<|endoftext|><|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n 4. \n<|end|>\n<|user|>\nAnd 3+3?<|end|>\n"
       "<|assistant|>\n"},
      // Gemma 2's template raises on a system message; that case is GemmaTwoJoinsASystemMessageAsGemmaThreeDoes.
      {"gemma.jinja", "gemma", "<bos>", "<eos>", "",
       "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4.<end_of_turn>\n"
       "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
      {"gemma3.jinja", "gemma", "<bos>", "<eos>",
       "<bos><start_of_turn>user\nYou are a terse assistant.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
       "4.<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n",
       "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4.<end_of_turn>\n"
       "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
      {"zephyr.jinja", "zephyr", "<s>", "</s>",
       "<|system|>\nYou are a terse assistant.</s>\n<|user|>\nWhat is 2+2?</s>\n<|assistant|>\n 4. \n</s>\n"
       "<|user|>\nAnd 3+3?</s>\n<|assistant|>\n",
       "<|user|>\nWhat is 2+2?</s>\n<|assistant|>\n 4. \n</s>\n<|user|>\nAnd 3+3?</s>\n<|assistant|>\n"},
  };
  return cases;
}

const Expected& expected_for(const std::string& file) {
  for (const Expected& e : expected()) {
    if (e.file == file) return e;
  }
  ADD_FAILURE() << "no expected rendering for " << file;
  return expected().front();
}

// The template detected from e.file, "today" fixed to kToday.
ChatTemplate detected(const Expected& e) {
  auto t = ChatTemplate::detect(read_template(e.file), e.bos, e.eos);
  EXPECT_TRUE(t.ok()) << e.file << ": " << t.status().to_string();
  ChatTemplate chat_template = std::move(t).value();
  chat_template.set_today(kToday);
  return chat_template;
}

TEST(ChatTemplateDetect, RecognisesTheFamilyOfEachPublishedTemplate) {
  for (const Expected& e : expected()) {
    auto t = ChatTemplate::detect(read_template(e.file), e.bos, e.eos);
    ASSERT_TRUE(t.ok()) << e.file << ": " << t.status().to_string();
    EXPECT_EQ(t.value().name(), e.family) << e.file;
  }
}

TEST(ChatTemplateRender, EachFamilyRendersTheConversationAsJinjaDoes) {
  for (const Expected& e : expected()) {
    SCOPED_TRACE(e.file);
    const ChatTemplate t = detected(e);
    auto without = t.render(kWithoutSystem, /*add_generation_prompt=*/true);
    ASSERT_TRUE(without.ok()) << without.status().to_string();
    EXPECT_EQ(without.value(), e.without_system);
    if (e.with_system.empty()) continue;
    auto with = t.render(kWithSystem, true);
    ASSERT_TRUE(with.ok()) << with.status().to_string();
    EXPECT_EQ(with.value(), e.with_system);
  }
}

TEST(ChatTemplateRender, QwenTwoDefaultSystemPromptComesFromItsTemplate) {
  auto qwen = ChatTemplate::detect(read_template("chatml.jinja"));
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen.value().default_system_prompt(), "You are a helpful assistant");
  auto plain = ChatTemplate::named("chatml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value().default_system_prompt(), "");
  auto rendered = plain.value().render(kWithoutSystem, true);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered.value().rfind("<|im_start|>user\n", 0), 0u) << rendered.value();
}

TEST(ChatTemplateRender, GemmaTwoJoinsASystemMessageAsGemmaThreeDoes) {
  // jinja2 raises "System role not supported" for Gemma 2's template; we
  // render what Gemma 3's template makes of the same conversation.
  const Expected& gemma2 = expected_for("gemma.jinja");
  const Expected& gemma3 = expected_for("gemma3.jinja");
  auto r = detected(gemma2).render(kWithSystem, true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r.value(), gemma3.with_system);
}

TEST(ChatTemplateRender, WithoutTheGenerationPromptEndsAfterTheLastMessage) {
  auto llama3 = ChatTemplate::named("llama3", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(llama3.ok());
  auto r = llama3.value().render(kWithoutSystem, false);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().ends_with("And 3+3?<|eot_id|>")) << r.value();
  // Phi-3 small writes EOS instead of opening a reply.
  auto phi = ChatTemplate::named("phi3-small", "", "<|endoftext|>");
  ASSERT_TRUE(phi.ok());
  r = phi.value().render(kWithoutSystem, false);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().ends_with("And 3+3?<|end|>\n<|endoftext|>")) << r.value();
}

TEST(ChatTemplateRender, TrimsUnicodeWhiteSpaceAsJinjaTrimDoes) {
  auto llama3 = ChatTemplate::named("llama3", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(llama3.ok());
  // U+00A0 and U+3000 are white space to Python's str.strip; U+200B is not.
  const std::vector<ChatMessage> m = {{"user", "\xC2\xA0 hi\t\xE3\x80\x80"}, {"assistant", "\xE2\x80\x8Bok\n"}};
  auto r = llama3.value().render(m, false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n\xE2\x80\x8Bok<|eot_id|>");
}

// Rendering messages[0..k] with the generation prompt is a prefix of
// rendering messages[0..k+1] when message k is the reply.
void expect_prefix_stable(const ChatTemplate& t, const std::vector<ChatMessage>& conversation) {
  for (size_t k = 1; k < conversation.size(); ++k) {
    if (conversation[k].role != "assistant") continue;
    const std::span<const ChatMessage> all(conversation);
    auto before = t.render(all.first(k), true);
    auto after = t.render(all.first(k + 1), false);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    ASSERT_TRUE(after.ok()) << after.status().to_string();
    EXPECT_TRUE(after.value().starts_with(before.value())) << t.name() << " at message " << k << ":\n"
                                                           << before.value() << "\nis not a prefix of\n"
                                                           << after.value();
  }
}

TEST(ChatTemplateRender, EveryFamilyIsPrefixStableAcrossTurns) {
  std::vector<ChatMessage> turns = kWithoutSystem;
  turns.push_back({"assistant", "6."});
  turns.push_back({"user", "Thanks."});
  turns.push_back({"assistant", "You are welcome."});
  std::vector<ChatMessage> with_system = turns;
  with_system.insert(with_system.begin(), kWithSystem[0]);
  for (const Expected& e : expected()) {
    SCOPED_TRACE(e.file);
    const ChatTemplate t = detected(e);
    expect_prefix_stable(t, turns);
    const bool moves_system_to_last_turn = e.family == "mistral-v3" || e.family == "mistral-v3-tekken";
    if (!e.with_system.empty() && !moves_system_to_last_turn) expect_prefix_stable(t, with_system);
  }
}

TEST(ChatTemplateRender, MistralV3MovesTheSystemPromptToTheLastTurn) {
  auto t = ChatTemplate::named("mistral-v3", "<s>", "</s>");
  ASSERT_TRUE(t.ok());
  const std::span<const ChatMessage> all(kWithSystem);
  auto first = t.value().render(all.first(2), true);
  auto second = t.value().render(all, true);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first.value(), "<s>[INST] You are a terse assistant.\n\nWhat is 2+2?[/INST]");
  EXPECT_FALSE(second.value().starts_with(first.value()));
}

TEST(ChatTemplateRender, UnknownRolesAreErrorsInEveryFamily) {
  for (std::string_view name : ChatTemplate::names()) {
    auto t = ChatTemplate::named(name, "<s>", "</s>");
    ASSERT_TRUE(t.ok()) << name;
    auto r = t.value().render(std::vector<ChatMessage>{{"user", "hi"}, {"function", "42"}}, true);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find("unknown role \"function\""), std::string::npos) << r.status().message();
    EXPECT_FALSE(t.value().render({}, true).ok()) << name << ": an empty conversation";
  }
}

TEST(ChatTemplateRender, RolesThatDoNotAlternateAreErrorsWhereTheTemplateRaises) {
  const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  const std::vector<ChatMessage> reply_first = {{"assistant", "a"}, {"user", "b"}};
  for (std::string_view name : {"llama2", "mistral-v0", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "gemma"}) {
    auto t = ChatTemplate::named(name, "<s>", "</s>");
    ASSERT_TRUE(t.ok());
    auto r = t.value().render(two_users, true);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_NE(r.status().message().find("must alternate"), std::string::npos) << r.status().message();
    EXPECT_FALSE(t.value().render(reply_first, true).ok()) << name;
  }
  // Families whose templates take any order render it.
  for (std::string_view name : {"chatml", "llama3", "llama3.1", "mistral-v7", "phi3-small", "zephyr"}) {
    EXPECT_TRUE(ChatTemplate::named(name).value().render(two_users, true).ok()) << name;
  }
}

TEST(ChatTemplateRender, SystemMessagesWhereMistralHasNoPlaceForThemAreErrors) {
  auto v0 = ChatTemplate::named("mistral-v0", "<s>", "</s>");
  ASSERT_TRUE(v0.ok());
  auto r = v0.value().render(kWithSystem, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no system role"), std::string::npos) << r.status().message();
  auto v1 = ChatTemplate::named("mistral-v1", "<s>", "</s>");
  ASSERT_TRUE(v1.ok());
  const std::vector<ChatMessage> late_system = {{"user", "a"}, {"system", "b"}, {"user", "c"}};
  EXPECT_FALSE(v1.value().render(late_system, true).ok());
}

TEST(ChatTemplateNamed, KnowsEveryListedName) {
  ASSERT_FALSE(ChatTemplate::names().empty());
  for (std::string_view name : ChatTemplate::names()) {
    auto t = ChatTemplate::named(name);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(t.value().name(), name);
  }
}

TEST(ChatTemplateNamed, AnUnknownNameListsTheValidOnes) {
  auto t = ChatTemplate::named("alpaca");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(t.status().message().find("\"alpaca\""), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("chatml, llama3"), std::string::npos) << t.status().message();
}

TEST(ChatTemplateNamed, RendersAsTheDetectedTemplateDoes) {
  for (const Expected& e : expected()) {
    if (e.file == "chatml.jinja") continue;    // Qwen 2 adds its default system prompt
    if (e.file == "llama3.2.jinja") continue;  // dated today, where named("llama3.1") has 3.1's date
    auto t = ChatTemplate::named(e.family, e.bos, e.eos);
    ASSERT_TRUE(t.ok());
    auto r = t.value().render(kWithoutSystem, true);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value(), e.without_system) << e.file;
  }
}

TEST(ChatTemplateDetect, AModelWithoutATemplateIsToldHowToChooseOne) {
  auto t = ChatTemplate::detect("");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(t.status().message().find("no chat template"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("--chat-template NAME (chatml, llama3"), std::string::npos)
      << t.status().message();
}

TEST(ChatTemplateDetect, AnUnrecognisedTemplateIsQuotedAndNamesTheChoices) {
  const std::string alpaca =
      "{% for message in messages %}{% if message['role'] == 'user' %}### Instruction:\n{{ message['content'] }}\n"
      "{% else %}### Response:\n{{ message['content'] }}{% endif %}{% endfor %}";
  auto t = ChatTemplate::detect(alpaca);
  ASSERT_FALSE(t.ok());
  const std::string msg = t.status().message();
  EXPECT_NE(msg.find("not one tensorpc recognises ({% for message in messages %}{% if message['role'] == 'user'…)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--chat-template NAME (chatml, llama3"), std::string::npos) << msg;
}

TEST(ChatTemplateLlama31, TheDatedSystemBlockMakesLlama31NotPlainLlama3) {
  auto dated = ChatTemplate::detect(
      "{{- bos_token }}<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n");
  ASSERT_TRUE(dated.ok()) << dated.status().to_string();
  EXPECT_EQ(dated.value().name(), "llama3.1");
  EXPECT_EQ(detected(expected_for("llama3.jinja")).name(), "llama3");
  // --chat-template llama3 stays plain Llama 3: no system block of its own.
  auto plain = ChatTemplate::named("llama3", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(plain.ok());
  auto r = plain.value().render(kWithoutSystem, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), expected_for("llama3.jinja").without_system);
}

TEST(ChatTemplateLlama31, NamedWritesLlama31sFixedDate) {
  auto t = ChatTemplate::named("llama3.1", "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(t.ok());
  t.value().set_today("01 Jan 2030");  // a fixed date is not today's
  auto r = t.value().render(kWithSystem, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), expected_for("llama3.1.jinja").with_system);
}

TEST(ChatTemplateLlama31, Llama31And33KeepTheirTemplatesFixedDate) {
  for (const char* file : {"llama3.1.jinja", "llama3.3.jinja"}) {
    ChatTemplate t = detected(expected_for(file));
    t.set_today("01 Jan 2030");
    auto r = t.render(kWithoutSystem, true);
    ASSERT_TRUE(r.ok());
    EXPECT_NE(r.value().find("Today Date: 26 Jul 2024\n\n<|eot_id|>"), std::string::npos) << file << ": " << r.value();
  }
}

// strftime("%d %b %Y") of the local date, in the C locale (tests do not set one).
std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%d %b %Y", &local);
  return text;
}

TEST(ChatTemplateLlama31, Llama32DatesItsSystemBlockWithTheDayOfRendering) {
  auto t = ChatTemplate::detect(read_template("llama3.2.jinja"), "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(t.ok());
  const std::string before = local_date();
  auto r = t.value().render(kWithoutSystem, true);
  const std::string after = local_date();
  ASSERT_TRUE(r.ok());
  std::smatch date;
  const std::regex today_line("Today Date: (\\d\\d [A-Z][a-z][a-z] \\d{4})\n\n<\\|eot_id\\|>");
  ASSERT_TRUE(std::regex_search(r.value(), date, today_line)) << r.value();
  EXPECT_TRUE(date[1] == before || date[1] == after) << date[1] << " is not " << before;
}

TEST(ChatTemplateLlama31, TheSystemBlockIsTheSameInEveryTurn) {
  const std::vector<ChatMessage> turns = {kWithSystem[0], kWithSystem[1], {"assistant", "4."}, kWithSystem[3]};
  for (const char* file : {"llama3.1.jinja", "llama3.2.jinja", "llama3.3.jinja"}) {
    SCOPED_TRACE(file);
    const ChatTemplate t = detected(expected_for(file));
    const std::span<const ChatMessage> all(turns);
    auto first = t.render(all.first(2), true);
    auto next = t.render(all, true);
    ASSERT_TRUE(first.ok() && next.ok());
    EXPECT_TRUE(next.value().starts_with(first.value())) << first.value() << "\nis not a prefix of\n" << next.value();
  }
}

TEST(ChatTemplateLlama31, TrimsTheSystemMessageAndWritesLaterOnesAsTurns) {
  // What jinja2 renders from llama3.1.jinja for each conversation.
  const ChatTemplate t = detected(expected_for("llama3.1.jinja"));
  const std::string block =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
      "Today Date: 26 Jul 2024\n\n";
  auto r = t.render(std::vector<ChatMessage>{{"system", "\xE3\x80\x80 Be brief.\n"}, {"user", "Hi"}}, true);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), block +
                           "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
  r = t.render(std::vector<ChatMessage>{{"user", "a"}, {"system", " b "}}, false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), block +
                           "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
                           "<|start_header_id|>system<|end_header_id|>\n\nb<|eot_id|>");
}

TEST(ChatTemplateLlama31, ToolResultsAreIpythonTurnsAndIpythonIsNoRole) {
  const ChatTemplate t = detected(expected_for("llama3.1.jinja"));
  auto ipython = t.render(std::vector<ChatMessage>{{"user", "What is 6*7?"}, {"ipython", "42"}}, true);
  ASSERT_FALSE(ipython.ok());
  EXPECT_EQ(ipython.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(ipython.status().message().find("unknown role \"ipython\""), std::string::npos)
      << ipython.status().message();
  auto tool = t.render(std::vector<ChatMessage>{{"user", "What is 6*7?"}, {"tool", "42"}}, true);
  ASSERT_TRUE(tool.ok()) << tool.status().to_string();
  EXPECT_NE(tool->find("<|start_header_id|>ipython<|end_header_id|>\n\n\"42\"<|eot_id|>"), std::string::npos) << *tool;
}

}  // namespace
}  // namespace tensorpc
