// A conversation that keeps its KV cache across turns (chat_session.h).
#include "model/runtime/chat_session.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "model/runtime/draft_model.h"
#include "model/runtime/next_token.h"
#include "model/runtime/speculative_step.h"

namespace tensorpc {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

StatusOr<ChatSession> ChatSession::create(Generator& gen, ChatTemplate chat_template, ChatSessionOptions options) {
  if (options.n_predict < 0) return invalid_argument("chat: n_predict must be ≥ 0 (0: until the turn ends)");
  if (const Status s = check_speculation(options.lookup, options.draft_model != nullptr, options.draft_max); !s.ok()) {
    return s.with_context("chat");
  }
  if (options.reply_room < 0 || options.reply_room >= gen.n_ctx()) {
    return invalid_argument("chat: the room kept for a reply must be smaller than the context");
  }
  TENSORPC_ASSIGN_OR_RETURN(Sampler sampler, Sampler::create(options.sampler));
  TENSORPC_RETURN_IF_ERROR(gen.reset());
  return ChatSession(gen, std::move(chat_template), std::move(options), std::move(sampler));
}

ChatSession::ChatSession(Generator& gen, ChatTemplate chat_template, ChatSessionOptions options, Sampler sampler)
    : gen_(&gen), template_(std::move(chat_template)), options_(std::move(options)), sampler_(std::move(sampler)) {
  if (!options_.system_prompt.empty()) messages_.push_back({"system", options_.system_prompt});
}

std::vector<int32_t> ChatSession::tokenize_all(const std::string& text) const {
  const Tokenizer& tok = gen_->model().tokenizer();
  std::vector<int32_t> tokens = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (tok.add_bos() && tok.bos() >= 0 && (tokens.empty() || tokens.front() != tok.bos())) {
    tokens.insert(tokens.begin(), tok.bos());
  }
  return tokens;
}

StatusOr<std::vector<int32_t>> ChatSession::tokens_for_turn(ChatTurn& turn) {
  const Tokenizer& tok = gen_->model().tokenizer();
  const int64_t n_ctx = gen_->n_ctx();
  const int64_t room = options_.reply_room > 0 ? options_.reply_room : std::max<int64_t>(1, n_ctx / 4);

  TENSORPC_ASSIGN_OR_RETURN(std::string rendered, template_.render(messages_, /*add_generation_prompt=*/true));
  std::vector<int32_t> fresh;
  size_t keep = 0;
  if (!evaluated_text_.empty() && rendered.starts_with(evaluated_text_)) {
    // The conversation goes on where the cache ends: only the new text.
    keep = evaluated_.size();
    fresh = tok.encode(std::string_view(rendered).substr(evaluated_text_.size()), false, true);
  } else {
    std::vector<int32_t> all = tokenize_all(rendered);
    const size_t limit = std::min(all.size(), evaluated_.size());
    while (keep < limit && all[keep] == evaluated_[keep]) ++keep;
    if (keep == all.size() && keep > 0) --keep;  // a step needs a token to give logits
    fresh.assign(all.begin() + static_cast<ptrdiff_t>(keep), all.end());
  }

  if (static_cast<int64_t>(keep + fresh.size()) + room > n_ctx) {
    // Drop the oldest turns (never the system prompt or the new message)
    // until the whole conversation leaves room for a reply.
    const size_t first = !messages_.empty() && messages_.front().role == "system" ? 1 : 0;
    std::vector<int32_t> all = tokenize_all(rendered);
    while (static_cast<int64_t>(all.size()) + room > n_ctx && messages_.size() > first + 1) {
      // A user message and the reply to it go together, so roles keep alternating.
      const size_t n = messages_.size() - first >= 3 ? 2 : 1;
      messages_.erase(messages_.begin() + static_cast<ptrdiff_t>(first),
                      messages_.begin() + static_cast<ptrdiff_t>(first + n));
      turn.dropped_messages += static_cast<int64_t>(n);
      TENSORPC_ASSIGN_OR_RETURN(rendered, template_.render(messages_, true));
      all = tokenize_all(rendered);
    }
    if (static_cast<int64_t>(all.size()) >= n_ctx) {
      return invalid_argument("chat: the conversation is " + std::to_string(all.size()) +
                              " tokens with this message alone; the context holds " + std::to_string(n_ctx) +
                              " (-c sets it)");
    }
    TENSORPC_RETURN_IF_ERROR(gen_->reset());
    evaluated_.clear();
    keep = 0;
    fresh = std::move(all);
  } else {
    TENSORPC_RETURN_IF_ERROR(gen_->rewind(static_cast<int64_t>(keep)));
    evaluated_.resize(keep);
  }
  evaluated_text_ = std::move(rendered);
  return fresh;
}

StatusOr<ChatTurn> ChatSession::reply(std::string_view message, const std::function<void(std::string_view)>& on_text,
                                      const std::atomic<bool>* cancel) {
  messages_.push_back({"user", std::string(message)});
  return generate_reply(on_text, cancel);
}

StatusOr<ChatTurn> ChatSession::respond(std::vector<ChatMessage> conversation,
                                        const std::function<void(std::string_view)>& on_text,
                                        const std::atomic<bool>* cancel) {
  if (conversation.empty() || conversation.back().role != "user") {
    return invalid_argument("chat: a conversation to respond to ends with the user's message");
  }
  messages_ = std::move(conversation);
  return generate_reply(on_text, cancel);
}

StatusOr<ChatTurn> ChatSession::generate_reply(const std::function<void(std::string_view)>& on_text,
                                               const std::atomic<bool>* cancel) {
  const Tokenizer& tok = gen_->model().tokenizer();
  ChatTurn turn;
  auto fresh = tokens_for_turn(turn);
  if (!fresh.ok()) {
    messages_.pop_back();
    return fresh.status();
  }
  // Whatever fails from here leaves the cache unknown: the next turn starts over.
  const auto fail = [&](const Status& s) {
    evaluated_.clear();
    evaluated_text_.clear();
    messages_.push_back({"assistant", turn.text});
    return s;
  };

  const Clock::time_point start = Clock::now();
  for (int32_t t : fresh.value()) sampler_.accept(t);
  auto token = next_token(*gen_, sampler_, fresh.value());
  if (!token.ok()) return fail(token.status());
  evaluated_.insert(evaluated_.end(), fresh.value().begin(), fresh.value().end());
  turn.evaluated = static_cast<int64_t>(fresh.value().size());
  turn.prompt_seconds = seconds_since(start);
  const Clock::time_point reply_start = Clock::now();

  DetokenizeStream stream(tok);
  std::vector<int32_t> fed;  // reply tokens evaluated into the cache
  const auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    turn.text += piece;
    if (on_text) on_text(piece);
  };
  // Drafts from the whole conversation (checked by create()).
  TENSORPC_ASSIGN_OR_RETURN(const std::unique_ptr<Drafter> drafter,
                            make_drafter(options_.lookup, options_.draft_model, options_.draft_max));
  if (drafter) {
    drafter->push(evaluated_);
    drafter->push(token.value());
  }
  int32_t last = -1;  // the last token taken, not yet in the cache
  // Keeps one sampled token; false: the reply ends with it. A step that
  // yields several gives them one by one, so every stop cuts where one-token
  // steps would.
  const auto take = [&](int32_t t) {
    if (last >= 0) {  // a token after `last` was picked: the step had fed it
      evaluated_.push_back(last);
      fed.push_back(last);
    }
    last = t;
    if (tok.is_end_of_generation(t)) {
      turn.stop = ChatStop::end_of_turn;
      return false;
    }
    sampler_.accept(t, /*generated=*/true);
    ++turn.generated;
    emit(stream.push(t));
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      turn.stop = ChatStop::cancelled;
      return false;
    }
    if (options_.n_predict > 0 && turn.generated >= options_.n_predict) {
      turn.stop = ChatStop::n_predict;
      return false;
    }
    if (static_cast<int64_t>(evaluated_.size()) + 1 > gen_->n_ctx()) {  // evaluated_: the positions fed
      turn.stop = ChatStop::context_full;
      return false;
    }
    return true;
  };
  bool more = take(token.value());
  while (more) {
    const size_t room = options_.n_predict > 0 ? static_cast<size_t>(options_.n_predict - turn.generated)
                                               : static_cast<size_t>(gen_->n_ctx());
    const Status s =
        decode_after(*gen_, sampler_, drafter.get(), last, room, [&](int32_t t) { return more = take(t); });
    if (!s.ok()) return fail(s);
  }
  if (drafter) turn.speculation = drafter->counts();
  emit(stream.flush());
  turn.reply_seconds = seconds_since(reply_start);

  // The cache now stands for the rendering plus the reply tokens fed to it.
  DetokenizeStream fed_text(tok);
  for (int32_t t : fed) evaluated_text_ += fed_text.push(t);
  evaluated_text_ += fed_text.flush();
  messages_.push_back({"assistant", turn.text});
  return turn;
}

}  // namespace tensorpc
