// ChatSession: a conversation with a placed model, turn by turn, keeping
// the KV cache from one turn to the next.
//
// Each turn renders the whole conversation with the model's chat template
// (chat_template.h) and evaluates only what the cache does not hold yet:
// the text after what was evaluated before (the last reply's end-of-turn
// marker, the new message, the header of the reply), so a turn costs its
// own tokens, not the conversation's. When the new rendering does not
// continue the old one text for text (a template that trims a reply, say),
// the session keeps the longest common run of tokens and evaluates the rest.
//
// A reply ends at an end-of-generation token (EOS, EOT, <|im_end|> …; it
// is not printed), after n_predict tokens, when the context is full, or when
// the caller's cancel flag is set (Ctrl-C). A message that would not leave
// room for a reply drops the oldest turns first (the system prompt stays)
// and re-evaluates what is left; the turn says how many messages went.
//
// Ownership: the session borrows the generator (and through it the model
// and placement), which must outlive it. One thread uses a session at a time;
// `cancel` may be set from any thread (or a signal handler).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/runtime/drafter.h"
#include "model/runtime/generator.h"
#include "model/runtime/sampler.h"
#include "model/text/chat_template.h"

namespace tensorpc {

struct ChatSessionOptions {
  SamplerOptions sampler;
  int64_t n_predict = 0;      // tokens of a reply at most; 0: until the turn ends or the context is full
  std::string system_prompt;  // empty: none
  // Positions kept free for the reply when old turns are dropped; 0: a
  // quarter of the context.
  int64_t reply_room = 0;
  // Speculative decoding by prompt lookup over the conversation
  // (generate.h's GenerateOptions::lookup): the same replies, fewer steps.
  bool lookup = false;
  // Or with a draft model's generator (draft_model.h): borrowed, kept
  // between turns, so each turn feeds it only what is new.
  Generator* draft_model = nullptr;
  int draft_max = 8;  // >= 1
};

enum class ChatStop { end_of_turn, n_predict, context_full, cancelled };

// One reply and what it cost.
struct ChatTurn {
  std::string text;  // the reply as the conversation keeps it
  ChatStop stop = ChatStop::end_of_turn;
  int64_t evaluated = 0;         // tokens of the conversation evaluated before the reply
  int64_t generated = 0;         // tokens of the reply
  int64_t dropped_messages = 0;  // oldest messages dropped to make room
  double prompt_seconds = 0;     // evaluating the conversation, through the reply's first token
  double reply_seconds = 0;      // the rest of the reply
  SpeculationCounts speculation;  // with lookup: its drafts and how they fared
};

class ChatSession {
 public:
  // `chat_template` renders the model's conversations (ChatTemplate::detect
  // on the model's tokenizer.chat_template, or ChatTemplate::named).
  static StatusOr<ChatSession> create(Generator& gen, ChatTemplate chat_template, ChatSessionOptions options);

  // Adds the user's message and generates the reply, giving its text to
  // `on_text` piece by piece as it is generated. The message stays in the
  // conversation with whatever reply came, also a cancelled one.
  StatusOr<ChatTurn> reply(std::string_view message, const std::function<void(std::string_view)>& on_text = {},
                           const std::atomic<bool>* cancel = nullptr);

  // The same for a whole conversation given at once (its last message the
  // user's), as a stateless API sends it: it replaces the session's, and
  // the cache keeps whatever run of tokens the two renderings share.
  StatusOr<ChatTurn> respond(std::vector<ChatMessage> conversation,
                             const std::function<void(std::string_view)>& on_text = {},
                             const std::atomic<bool>* cancel = nullptr);

  const std::vector<ChatMessage>& messages() const { return messages_; }
  const ChatTemplate& chat_template() const { return template_; }
  // Positions of the cache in use: the conversation evaluated so far.
  int64_t cached_tokens() const { return static_cast<int64_t>(evaluated_.size()); }

 private:
  ChatSession(Generator& gen, ChatTemplate chat_template, ChatSessionOptions options, Sampler sampler);

  // The tokens of a whole rendering: BOS first when the tokenizer adds one
  // and the template did not write it.
  std::vector<int32_t> tokenize_all(const std::string& text) const;
  // Generates the reply to messages_, and appends it.
  StatusOr<ChatTurn> generate_reply(const std::function<void(std::string_view)>& on_text,
                                    const std::atomic<bool>* cancel);
  // The tokens this turn must evaluate, after rewinding the generator to
  // what it keeps; drops old turns when they do not fit.
  StatusOr<std::vector<int32_t>> tokens_for_turn(ChatTurn& turn);

  Generator* gen_;
  ChatTemplate template_;
  ChatSessionOptions options_;
  Sampler sampler_;
  std::vector<ChatMessage> messages_;
  std::vector<int32_t> evaluated_;  // the tokens in the cache, in order
  std::string evaluated_text_;      // the text they stand for, when it is known exactly; else empty
};

}  // namespace tensorpc
