// The routes of `tensorpc serve` (http_routes.h).
#include "serve/http_routes.h"

#include <openssl/crypto.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <span>

#include "serve/anthropic_api.h"
#include "serve/embeddings_api.h"
#include "serve/ollama_api.h"
#include "serve/openai_response.h"
#include "serve/token_api.h"
#include "serve/tool_reply.h"
#include "serve/web_assets.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::serve {
namespace {

using json = nlohmann::json;

ApiError api_error(int status, std::string type, std::string code, std::string message) {
  return ApiError{
      .status = status, .type = std::move(type), .message = std::move(message), .code = std::move(code), .param = {}};
}

ApiError unavailable_error(std::string message) {
  return api_error(503, "server_error", "unavailable", std::move(message));
}

HttpReply retry_later(const ApiError& e) {
  HttpReply r = error_reply(e);
  r.headers.emplace_back("Retry-After", "1");
  return r;
}

FinishReason finish_reason(Finish f) { return f == Finish::length ? FinishReason::length : FinishReason::stop; }

std::string request_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return std::string(prefix) + buf;
}

// A text the slot's context cannot hold whatever its tokens: more bytes than
// the context's tokens could stand for. Refused before tokenizing, which
// would cost time and memory in proportion to the text.
Status check_prompt_bytes(size_t bytes, const Tokenizer& tok, int64_t slot_context) {
  const size_t per_token = tok.max_token_bytes();
  const auto tokens = static_cast<size_t>(slot_context);
  if (per_token == 0 || tokens > SIZE_MAX / per_token || bytes <= tokens * per_token) return Status();
  return out_of_memory("the prompt has " + std::to_string(bytes) + " bytes; the context of " +
                       std::to_string(slot_context) + " tokens (prompt and reply together) holds at most " +
                       std::to_string(tokens * per_token) + " bytes of text with this vocabulary");
}

// The failure an outcome is, if any: a 503 for a lost server nothing could
// replace yet (`later`: the next request tries again) or a shutdown, a 500
// for any other error.
std::optional<ApiError> failure_of(const Outcome& o, bool* later = nullptr) {
  const bool lost = o.finish == Finish::error && o.status.code() == StatusCode::unavailable;
  if (later != nullptr) *later = lost;
  if (o.finish == Finish::error) {
    return lost ? unavailable_error(o.status.message())
                : api_error(500, "server_error", "generation_failed", o.status.to_string());
  }
  if (o.finish == Finish::cancelled) return unavailable_error("the server is shutting down");
  return std::nullopt;
}

// A rendered conversation's tokens: control tokens read as such, and the
// model's BOS first when it wants one and the template did not write it.
std::vector<int32_t> templated_tokens(const Tokenizer& tok, const std::string& rendered) {
  std::vector<int32_t> tokens = tok.encode(rendered, /*add_special=*/false, /*parse_special=*/true);
  if (tok.add_bos() && tok.bos() >= 0 && (tokens.empty() || tokens.front() != tok.bos())) {
    tokens.insert(tokens.begin(), tok.bos());
  }
  return tokens;
}

// A conversation rendered with the model's template, as tokens; or why not
// (the template's error, a text the slot cannot hold).
StatusOr<std::vector<int32_t>> conversation_tokens(const ChatTemplate& chat_template,
                                                   std::span<const ChatMessage> messages, const ToolPlan& tools,
                                                   const Tokenizer& tok, int64_t slot_context) {
  TENSORPC_ASSIGN_OR_RETURN(std::string rendered, render_with_tools(chat_template, messages, tools));
  TENSORPC_RETURN_IF_ERROR(check_prompt_bytes(rendered.size(), tok, slot_context));
  return templated_tokens(tok, rendered);
}

// invalid_argument when a prompt of `n` tokens leaves a slot no room for a reply.
Status check_prompt_fits(size_t n, int64_t slot_context) {
  if (static_cast<int64_t>(n) < slot_context) return Status();
  return invalid_argument("the prompt has " + std::to_string(n) + " tokens; the context holds " +
                          std::to_string(slot_context) + " (prompt and reply together)");
}

// The prompt of a request as tokens, or why it is refused (a 400).
StatusOr<std::vector<int32_t>> prompt_tokens(Endpoint endpoint, CompletionRequest& r, const ServedModel& model,
                                             const ToolPlan& tools, std::string* refusal_param) {
  const Tokenizer& tok = model.engine->model().tokenizer();
  const int64_t slot_context = model.engine->slot_context();
  if (endpoint == Endpoint::chat) {
    *refusal_param = "messages";
    return conversation_tokens(*model.chat_template, r.messages, tools, tok, slot_context);
  }
  *refusal_param = "prompt";
  if (r.prompt_is_tokens) return std::move(r.prompt_tokens);
  TENSORPC_RETURN_IF_ERROR(check_prompt_bytes(r.prompt.size(), tok, slot_context));
  return tok.encode(r.prompt, /*add_special=*/true, /*parse_special=*/false);
}

// A request's answer, put together from what the engine hands over on its
// thread: one engine request per choice (`n`), the answer whole once every
// choice has ended, or streamed chunk by chunk with each chunk's choice index.
struct Exchange {
  std::shared_ptr<Responder> out;
  Endpoint endpoint;
  std::string id, model;
  int64_t created = 0;
  bool stream = false, include_usage = false;
  bool with_logprobs = false;      // the request asked for log probabilities
  const Tokenizer* tok = nullptr;  // their tokens' text

  struct ChoiceState {
    std::string text;                // the whole text (not streamed): the content, with tools
    std::optional<ToolReply> tools;  // with tools: the reply's calls, read as it comes
    // Every token's (not streamed), or those since the choice's last chunk (streamed).
    std::vector<LogprobEntry> logprobs;
    size_t text_offset = 0;  // a streamed completion's text before `logprobs`
    std::optional<Outcome> outcome;
  };
  std::mutex mu;
  std::vector<ChoiceState> choices;  // guarded by mu
  int ended = 0;                     // guarded by mu: choices whose outcome came
  bool abandoned = false;            // guarded by mu: answered early (a choice could not be submitted)
  std::string pending;               // guarded by mu: events before the stream began
  bool started = false;              // guarded by mu: the stream's header and first chunks handed to `out`
  std::optional<std::string> tail;   // guarded by mu: the stream's last events, once known

  // A chunk of choice `i` with `piece`, and the log probabilities of its tokens since its last chunk; mu held.
  std::string event(int i, std::string_view piece, std::optional<FinishReason> finish) {
    ChoiceState& c = choices[static_cast<size_t>(i)];
    const Logprobs lp = with_logprobs ? &c.logprobs : nullptr;
    std::string e = endpoint == Endpoint::chat
                        ? chat_chunk_event(id, created, model, piece, false, finish, include_usage, lp, i)
                        : text_chunk_event(id, created, model, piece, finish, include_usage, lp, c.text_offset, i);
    for (const LogprobEntry& entry : c.logprobs) c.text_offset += entry.token.size();
    c.logprobs.clear();
    return e;
  }
  void send(std::string events) {  // mu held
    if (started) {
      out->send(std::move(events));
    } else {
      pending += events;
    }
  }
  void on_logprobs(int i, const TokenLogprobs& t) {
    LogprobEntry e{.token = tok->token_to_piece(t.chosen.token), .logprob = t.chosen.logprob, .top = {}};
    for (const TokenLogprob& alt : t.top) e.top.emplace_back(tok->token_to_piece(alt.token), alt.logprob);
    std::lock_guard lock(mu);
    choices[static_cast<size_t>(i)].logprobs.push_back(std::move(e));
  }
  // Content and calls of choice `i`: kept whole, or streamed; mu held.
  void emit(int i, std::string_view content, const std::vector<ToolReply::CallPiece>& calls = {}) {
    if (!stream) {
      choices[static_cast<size_t>(i)].text += content;
      return;
    }
    if (!content.empty()) send(event(i, content, std::nullopt));
    for (const ToolReply::CallPiece& c : calls) {
      send(tool_call_chunk_event(id, created, model, i, c.call, c.id, c.name, c.arguments, include_usage));
    }
  }
  // False once the answer no longer wants text: the client is gone, or it was answered early.
  bool on_text(int i, std::string_view piece) {
    std::lock_guard lock(mu);
    if (abandoned) return false;
    ChoiceState& c = choices[static_cast<size_t>(i)];
    if (c.tools) {
      const ToolReply::Output o = c.tools->feed(piece);
      emit(i, o.content, o.calls);
    } else {
      emit(i, piece);
    }
    return !out->gone()->load();
  }
  // "tool_calls" for a reply that called tools and ended of itself.
  FinishReason finish_of(const ChoiceState& c) const {
    const FinishReason f = finish_reason(c.outcome->finish);
    return f == FinishReason::stop && c.tools && !c.tools->calls().empty() ? FinishReason::tool_calls : f;
  }
  void on_done(int i, const Outcome& o) {
    std::lock_guard lock(mu);
    if (abandoned) return;
    ChoiceState& c = choices[static_cast<size_t>(i)];
    c.outcome = o;
    if (c.tools) {
      const ToolReply::Output rest = c.tools->finish();
      emit(i, rest.content, rest.calls);
    }
    ++ended;
    bool later = false;
    if (stream && !failure_of(o, &later)) send(event(i, "", finish_of(c)));
    if (ended < static_cast<int>(choices.size())) return;
    // Every choice ended: the answer, or the first failure.
    Usage usage{choices[0].outcome->prompt_tokens, 0};
    std::optional<ApiError> failure;
    for (const ChoiceState& c : choices) {
      usage.completion_tokens += c.outcome->completion_tokens;
      if (!failure) failure = failure_of(*c.outcome, &later);
    }
    if (!stream) {
      if (failure) return out->reply(later ? retry_later(*failure) : error_reply(*failure));
      std::vector<Choice> list;
      for (const ChoiceState& c : choices) {
        list.push_back(
            {c.text, finish_of(c), with_logprobs ? &c.logprobs : nullptr, c.tools ? &c.tools->calls() : nullptr});
      }
      out->reply(HttpReply{.status = 200,
                           .content_type = "application/json",
                           .body = endpoint == Endpoint::chat ? chat_completion_json(id, created, model, list, usage)
                                                              : text_completion_json(id, created, model, list, usage),
                           .headers = {}});
      return;
    }
    std::string last = failure ? error_event(*failure) : std::string();
    if (!failure && include_usage) last += usage_chunk_event(endpoint, id, created, model, usage);
    last += done_event();
    if (started) return out->end(std::move(last));
    tail = std::move(last);
  }
  // A choice could not be submitted: `reply` answers now, and the choices already
  // submitted stop at their first text (their outcomes are dropped).
  void abandon(HttpReply reply) {
    std::lock_guard lock(mu);
    abandoned = true;
    out->reply(std::move(reply));
  }
  // After every submit(): the stream begins, with what the engine said meanwhile.
  void begin_stream() {
    std::lock_guard lock(mu);
    started = true;
    out->start_events();
    std::string first;
    if (endpoint == Endpoint::chat) {
      for (size_t i = 0; i < choices.size(); ++i) {
        first +=
            chat_chunk_event(id, created, model, "", true, std::nullopt, include_usage, nullptr, static_cast<int>(i));
      }
    }
    first += pending;
    pending.clear();
    if (!first.empty()) out->send(std::move(first));
    if (tail) out->end(std::move(*tail));
  }
};

// One answer in another API's shape (Anthropic's, Ollama's), from the
// engine's thread: the text whole at the end, or each piece as an event (held
// until the stream began), then the last events. The shape's own parts are
// the hooks.
struct ShapedExchange {
  std::shared_ptr<Responder> out;
  std::string model;
  bool stream = false;

  std::mutex mu;
  std::string text;                 // guarded by mu: the whole text (not streamed) or events not yet sent (streamed)
  bool started = false;             // guarded by mu
  std::optional<std::string> tail;  // guarded by mu
  std::optional<ToolReply> tools;   // guarded by mu: with tools, the reply's calls, read as it comes

  virtual ~ShapedExchange() = default;
  virtual std::string piece_event(std::string_view piece) = 0;
  // Events for pieces of calls as they come (streamed); none: the shape gives the calls at the end.
  virtual std::string call_events(const std::vector<ToolReply::CallPiece>&) { return {}; }
  // The whole answer (not streamed), or the stream's last events; `failure` when it failed.
  virtual HttpReply whole(const Outcome& o, const std::optional<ApiError>& failure) const = 0;
  virtual std::string last_events(const Outcome& o, const std::optional<ApiError>& failure) const = 0;
  virtual std::string opening() const { return {}; }
  virtual bool ndjson() const { return false; }

  const std::vector<ToolCall>& calls() const {
    static const std::vector<ToolCall> kNone;
    return tools ? tools->calls() : kNone;
  }
  // Content and calls: kept whole, or as events; mu held.
  void take(std::string_view content, const std::vector<ToolReply::CallPiece>& pieces = {}) {
    if (!stream) {
      text += content;
      return;
    }
    std::string events = content.empty() ? std::string() : piece_event(content);
    if (!pieces.empty()) events += call_events(pieces);
    if (events.empty()) return;
    if (started) {
      out->send(std::move(events));
    } else {
      text += events;
    }
  }
  bool on_text(std::string_view piece) {
    std::lock_guard lock(mu);
    if (tools) {
      const ToolReply::Output o = tools->feed(piece);
      take(o.content, o.calls);
    } else {
      take(piece);
    }
    return !out->gone()->load();
  }
  void on_done(const Outcome& o) {
    const std::optional<ApiError> failure = failure_of(o);
    std::lock_guard lock(mu);
    if (tools) {
      const ToolReply::Output rest = tools->finish();
      take(rest.content, rest.calls);
    }
    if (!stream) return out->reply(whole(o, failure));
    std::string last = last_events(o, failure);
    if (started) return out->end(std::move(last));
    tail = std::move(last);
  }
  void begin_stream() {
    std::lock_guard lock(mu);
    started = true;
    out->start_events(ndjson());
    std::string first = opening() + text;
    text.clear();
    if (!first.empty()) out->send(std::move(first));
    if (tail) out->end(std::move(*tail));
  }
};

HttpReply json_reply(const ApiError& e, std::string body) {
  HttpReply r{.status = e.status, .content_type = "application/json", .body = std::move(body), .headers = {}};
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// An Ollama answer (POST /api/chat, /api/generate): NDJSON lines as the text
// comes, or one object at the end.
struct OllamaExchange : ShapedExchange {
  bool chat = true;

  static HttpReply error(const ApiError& e) { return json_reply(e, ollama_error_json(e.message)); }
  static OllamaDone done_of(const Outcome& o) {
    return {.done_reason = o.finish == Finish::length ? "length" : "stop",
            .prompt_tokens = o.prompt_tokens - o.cached_tokens,
            .eval_tokens = o.completion_tokens,
            .total_seconds = o.seconds,
            .prompt_seconds = o.first_token_seconds - o.queue_seconds,
            .eval_seconds = o.seconds - o.first_token_seconds};
  }
  std::string piece_event(std::string_view piece) override { return ollama_piece_line(chat, model, piece); }
  HttpReply whole(const Outcome& o, const std::optional<ApiError>& failure) const override {
    if (failure) return error(*failure);
    return {.status = 200,
            .content_type = "application/json",
            .body = ollama_done_line(chat, model, text, done_of(o), calls()),
            .headers = {}};
  }
  // Streamed, the calls come whole in a line before the last, as Ollama sends them.
  std::string last_events(const Outcome& o, const std::optional<ApiError>& failure) const override {
    if (failure) return ollama_error_json(failure->message) + "\n";
    std::string lines = calls().empty() ? std::string() : ollama_tool_calls_line(model, calls());
    return lines + ollama_done_line(chat, model, "", done_of(o));
  }
  bool ndjson() const override { return true; }
};

// An Anthropic message's answer (POST /v1/messages).
struct MessageExchange : ShapedExchange {
  std::string id;
  int64_t input_tokens = 0;
  int block = 0;           // guarded by mu: the content block open in the stream (0: the first text block)
  bool text_block = true;  // guarded by mu: whether it is a text block

  static HttpReply error(const ApiError& e) { return json_reply(e, anthropic_error_json(e)); }
  MessageEnd end_of(const Outcome& o) const {
    if (!o.stop_string.empty()) return {.stop_reason = "stop_sequence", .stop_sequence = o.stop_string};
    if (o.finish == Finish::length) return {.stop_reason = "max_tokens", .stop_sequence = {}};
    return {.stop_reason = calls().empty() ? "end_turn" : "tool_use", .stop_sequence = {}};
  }
  std::string piece_event(std::string_view piece) override {
    std::string events;
    if (!text_block) {  // text after a call: a text block of its own
      events = block_switch_events(block, block + 1);
      ++block;
      text_block = true;
    }
    return events + text_delta_event(block, piece);
  }
  std::string call_events(const std::vector<ToolReply::CallPiece>& pieces) override {
    std::string events;
    for (const ToolReply::CallPiece& p : pieces) {
      if (!p.id.empty()) {
        events += block_switch_events(block, block + 1, p.id, p.name);
        ++block;
        text_block = false;
      }
      if (!p.arguments.empty()) events += input_json_delta_event(block, p.arguments);
    }
    return events;
  }
  HttpReply whole(const Outcome& o, const std::optional<ApiError>& failure) const override {
    if (failure) return error(*failure);
    return {.status = 200,
            .content_type = "application/json",
            .body = message_json(id, model, text, end_of(o), input_tokens, o.completion_tokens, calls()),
            .headers = {}};
  }
  std::string last_events(const Outcome& o, const std::optional<ApiError>& failure) const override {
    return failure ? anthropic_error_event(*failure) : message_end_events(end_of(o), o.completion_tokens, block);
  }
  std::string opening() const override { return message_start_events(id, model, input_tokens); }
};

}  // namespace

HttpReply error_reply(const ApiError& e) {
  return HttpReply{.status = e.status, .content_type = "application/json", .body = error_json(e), .headers = {}};
}

HttpRoutes::HttpRoutes(std::string model_id, std::string api_key)
    : model_id_(std::move(model_id)), api_key_(std::move(api_key)) {
  for (const WebAsset& a : web_assets()) {
    routes_.push_back({.path = a.path, .get = true, .post = false, .open = true, .quick = true, .label = "page"});
  }
  routes_.push_back({.path = "/health", .get = true, .post = false, .open = true, .quick = true, .label = "health"});
  routes_.push_back(
      {.path = "/v1/models", .get = true, .post = false, .open = false, .quick = true, .label = "models"});
  // Both ask the servers for figures: a worker waits for them, not the front.
  routes_.push_back(
      {.path = "/metrics", .get = true, .post = false, .open = false, .quick = false, .label = "metrics"});
  routes_.push_back(
      {.path = "/v1/cluster", .get = true, .post = false, .open = false, .quick = false, .label = "cluster"});
  routes_.push_back(
      {.path = "/v1/chat/completions", .get = false, .post = true, .open = false, .quick = false, .label = "chat"});
  routes_.push_back(
      {.path = "/v1/completions", .get = false, .post = true, .open = false, .quick = false, .label = "completions"});
  routes_.push_back(
      {.path = "/v1/embeddings", .get = false, .post = true, .open = false, .quick = false, .label = "embeddings"});
  routes_.push_back(
      {.path = "/v1/messages", .get = false, .post = true, .open = false, .quick = false, .label = "messages"});
  routes_.push_back(
      {.path = "/api/chat", .get = false, .post = true, .open = false, .quick = false, .label = "ollama"});
  routes_.push_back(
      {.path = "/api/generate", .get = false, .post = true, .open = false, .quick = false, .label = "ollama"});
  routes_.push_back(
      {.path = "/api/embed", .get = false, .post = true, .open = false, .quick = false, .label = "ollama"});
  routes_.push_back({.path = "/api/tags", .get = true, .post = false, .open = false, .quick = true, .label = "ollama"});
  routes_.push_back(
      {.path = "/api/show", .get = false, .post = true, .open = false, .quick = false, .label = "ollama"});
  // The tokenizer and the template alone: no step, but text as long as a body may be.
  routes_.push_back(
      {.path = "/tokenize", .get = false, .post = true, .open = false, .quick = false, .label = "tokenize"});
  routes_.push_back(
      {.path = "/detokenize", .get = false, .post = true, .open = false, .quick = false, .label = "detokenize"});
  routes_.push_back({.path = "/apply-template",
                     .get = false,
                     .post = true,
                     .open = false,
                     .quick = false,
                     .label = "apply-template"});
}

const RouteInfo* HttpRoutes::find(std::string_view path) const {
  for (const RouteInfo& r : routes_) {
    if (r.path == path) return &r;
  }
  return nullptr;
}

bool HttpRoutes::authorized(std::string_view authorization, std::string_view x_api_key) const {
  if (api_key_.empty()) return true;
  // Constant time over the key: the comparison does not stop at the first difference.
  const auto same = [](std::string_view got, const std::string& want) {
    return got.size() == want.size() && CRYPTO_memcmp(got.data(), want.data(), want.size()) == 0;
  };
  return same(authorization, "Bearer " + api_key_) || same(x_api_key, api_key_);
}

void HttpRoutes::count(std::string_view label, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(label), status}];
}

void HttpRoutes::set_loading(std::string what) {
  std::lock_guard lock(mu_);
  loading_ = std::move(what);
}

void HttpRoutes::set_failed(std::string why) {
  std::lock_guard lock(mu_);
  failed_ = std::move(why);
}

void HttpRoutes::set_model(ServedModel model) {
  std::lock_guard lock(mu_);
  model_ = std::move(model);
  ready_.store(true);
}

std::optional<ApiError> HttpRoutes::not_ready() const {
  if (ready_.load()) return std::nullopt;
  std::lock_guard lock(mu_);
  if (!failed_.empty()) return unavailable_error("the model failed to load: " + failed_);
  return unavailable_error("the model is loading: " + loading_);
}

void HttpRoutes::handle(const RouteInfo& route, std::string body, std::shared_ptr<Responder> out) {
  const std::string_view path = route.path;
  if (route.label == "page") {
    for (const WebAsset& a : web_assets()) {
      if (a.path == path) {
        return out->reply(
            {.status = 200, .content_type = std::string(a.content_type), .body = std::string(a.body), .headers = {}});
      }
    }
  }
  if (path == "/health") return out->reply(health());
  if (path == "/v1/models") {
    return out->reply({.status = 200,
                       .content_type = "application/json",
                       .body = models_json(model_id_, started_, "tensorpc"),
                       .headers = {}});
  }
  if (path == "/metrics") {
    return out->reply(
        {.status = 200, .content_type = "text/plain; version=0.0.4; charset=utf-8", .body = metrics(), .headers = {}});
  }
  if (path == "/v1/cluster") {
    if (auto e = not_ready()) return out->reply(error_reply(*e));
    return out->reply({.status = 200, .content_type = "application/json", .body = cluster(), .headers = {}});
  }
  if (path == "/tokenize" || path == "/detokenize" || path == "/apply-template") {
    if (auto e = not_ready()) return out->reply(retry_later(*e));
    const Tokenizer& tok = model_.engine->model().tokenizer();
    const ChatTemplate* chat_template = model_.chat_template ? &*model_.chat_template : nullptr;
    const auto answer = path == "/tokenize"     ? tokenize_json(tok, body)
                        : path == "/detokenize" ? detokenize_json(tok, body)
                                                : apply_template_json(chat_template, model_.chat_template_error, body);
    if (auto* e = std::get_if<ApiError>(&answer)) return out->reply(error_reply(*e));
    return out->reply(
        {.status = 200, .content_type = "application/json", .body = std::get<std::string>(answer), .headers = {}});
  }
  if (path == "/v1/messages") return messages(body, std::move(out));
  if (path == "/v1/embeddings" || path == "/api/embed") return embeddings(path == "/api/embed", body, std::move(out));
  if (path == "/api/chat" || path == "/api/generate") return ollama(path == "/api/chat", body, std::move(out));
  if (path == "/api/tags" || path == "/api/show") {
    if (auto e = not_ready()) return out->reply(OllamaExchange::error(*e));
    const auto answer = path == "/api/tags" ? std::variant<std::string, ApiError>(ollama_tags_json(ollama_model()))
                                            : ollama_show_json(ollama_model(), body);
    if (auto* e = std::get_if<ApiError>(&answer)) return out->reply(OllamaExchange::error(*e));
    return out->reply(
        {.status = 200, .content_type = "application/json", .body = std::get<std::string>(answer), .headers = {}});
  }
  completion(path == "/v1/chat/completions" ? Endpoint::chat : Endpoint::completion, body, std::move(out));
}

HttpReply HttpRoutes::health() const {
  if (auto e = not_ready()) {
    HttpReply r{.status = 503,
                .content_type = "application/json",
                .body = json{{"status", "loading"}, {"message", e->message}}.dump(),
                .headers = {}};
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  const EngineStats s = model_.engine->stats();
  RecoveryView r = model_.recovery ? model_.recovery() : RecoveryView{};
  if (!model_.recovery && s.last_step_failed) {
    // No recovery (--no-recover, or no servers): the last step's failure is the news.
    r.health = "degraded";
    r.reason = "the last step failed: " + s.last_error;
  }
  json body{{"status", r.health}, {"slots_idle", s.slots - s.active}, {"slots_busy", s.active}, {"queued", s.queued}};
  if (!r.reason.empty()) body["reason"] = r.reason;
  if (!s.last_error.empty()) body["last_error"] = s.last_error;
  // Recovering, or a lost server with nothing in its place: requests wait or are refused for now.
  HttpReply reply{.status = r.serving && r.health != "recovering" ? 200 : 503,
                  .content_type = "application/json",
                  .body = body.dump(-1, ' ', false, json::error_handler_t::replace),
                  .headers = {}};
  if (reply.status == 503) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

void HttpRoutes::completion(Endpoint endpoint, const std::string& body, std::shared_ptr<Responder> out) {
  if (auto e = not_ready()) return out->reply(retry_later(*e));
  thread_local std::mt19937_64 seeds(std::random_device{}());
  auto parsed = parse_completion_request(endpoint, body, seeds());
  if (auto* e = std::get_if<ApiError>(&parsed)) return out->reply(error_reply(*e));
  CompletionRequest r = std::move(std::get<CompletionRequest>(parsed));
  if (!r.model.empty() && r.model != model_id_) {
    return out->reply(error_reply(
        invalid_request("model_not_found", "model",
                        "the model '" + r.model + "' is not served here; this server serves '" + model_id_ + "'")));
  }
  if (endpoint == Endpoint::chat && !model_.chat_template) {
    return out->reply(error_reply(invalid_request("no_chat_template", "messages",
                                                  "this model has no chat template tensorpc understands (" +
                                                      model_.chat_template_error + "); use /v1/completions")));
  }
  Engine& engine = *model_.engine;
  ToolPlan tools;
  if (endpoint == Endpoint::chat) {
    auto plan = plan_tools(*model_.chat_template, r.tools, r.tool_choice, r.tool_choice_name, r.parallel_tool_calls);
    if (!plan.ok()) return out->reply(error_reply(invalid_request("invalid_value", "tools", plan.status().message())));
    tools = std::move(plan).value();
  }
  std::string param;
  auto tokens = prompt_tokens(endpoint, r, model_, tools, &param);
  if (!tokens.ok()) {
    const bool too_long = tokens.status().code() == StatusCode::out_of_memory;  // check_prompt_bytes
    return out->reply(error_reply(
        invalid_request(too_long ? "context_length_exceeded" : "invalid_value", param, tokens.status().message())));
  }
  Request work;
  work.prompt = std::move(tokens).value();
  if (Status s = check_prompt_fits(work.prompt.size(), engine.slot_context()); !s.ok()) {
    return out->reply(error_reply(invalid_request("context_length_exceeded", param, s.message())));
  }
  work.max_tokens = r.max_tokens;
  work.sampler = r.sampler;
  work.stop = r.stop;
  work.special_text = tools.special_text();
  if (Status s = constrain(tools.forced ? tools.grammar : r.grammar, work.sampler); !s.ok()) {
    return out->reply(
        error_reply(invalid_request("invalid_value", tools.forced ? "tools" : "response_format", s.message())));
  }

  if (r.n > engine.options().parallel) {
    return out->reply(
        error_reply(invalid_request("invalid_value", "n",
                                    "'n' is " + std::to_string(r.n) + ": this server generates at most " +
                                        std::to_string(engine.options().parallel) + " at once (--parallel)")));
  }
  auto ex = std::make_shared<Exchange>();
  ex->out = out;
  ex->endpoint = endpoint;
  ex->id = request_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-");
  ex->model = model_id_;
  ex->created = static_cast<int64_t>(std::time(nullptr));
  ex->stream = r.stream;
  ex->include_usage = r.include_usage;
  ex->with_logprobs = r.top_logprobs >= 0;
  ex->tok = &engine.model().tokenizer();
  ex->choices.resize(static_cast<size_t>(r.n));
  if (tools.active()) {
    for (Exchange::ChoiceState& c : ex->choices) c.tools.emplace(tools);
  }
  work.top_logprobs = r.top_logprobs;
  work.cancel = out->gone();
  for (int i = 0; i < static_cast<int>(r.n); ++i) {
    Request choice = work;
    choice.sampler.seed = r.sampler.seed + static_cast<uint64_t>(i);  // each choice its own draws
    if (ex->with_logprobs) choice.on_logprobs = [ex, i](const TokenLogprobs& t) { ex->on_logprobs(i, t); };
    choice.on_text = [ex, i](std::string_view piece) { return ex->on_text(i, piece); };
    choice.on_done = [ex, i](const Outcome& o) { ex->on_done(i, o); };
    if (const Status s = engine.submit(std::move(choice)); !s.ok()) {
      if (s.code() == StatusCode::out_of_memory) return ex->abandon(retry_later(unavailable_error(s.message())));
      return ex->abandon(error_reply(invalid_request("invalid_value", "", s.message())));
    }
  }
  if (ex->stream) ex->begin_stream();
}

std::string HttpRoutes::metrics() const {
  std::string out;
  const auto metric = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  const auto value = [&](const std::string& name, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %.10g\n", v);
    out += name + buf;
  };
  metric("tensorpc_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, n] : requests_) {
      value("tensorpc_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
            static_cast<double>(n));
    }
  }
  metric("tensorpc_ready", "gauge", "1 once the model is loaded and served.");
  value("tensorpc_ready", ready_.load() ? 1 : 0);
  if (!ready_.load()) return out;
  const EngineStats s = model_.engine->stats();
  metric("tensorpc_prompt_tokens_total", "counter",
         "Prompt tokens evaluated (those found in a slot's cache not counted).");
  value("tensorpc_prompt_tokens_total", static_cast<double>(s.prompt_tokens));
  metric("tensorpc_generated_tokens_total", "counter", "Tokens generated.");
  value("tensorpc_generated_tokens_total", static_cast<double>(s.generated_tokens));
  metric("tensorpc_tokens_per_second", "gauge",
         "Tokens generated per second over the last 5 seconds, all slots together.");
  value("tensorpc_tokens_per_second", s.tokens_per_second);
  metric("tensorpc_steps_total", "counter", "Batched forward passes run.");
  value("tensorpc_steps_total", static_cast<double>(s.steps));
  metric("tensorpc_queue_depth", "gauge", "Requests waiting for a slot.");
  value("tensorpc_queue_depth", s.queued);
  metric("tensorpc_slots_active", "gauge", "Slots generating.");
  value("tensorpc_slots_active", s.active);
  metric("tensorpc_slots_total", "gauge", "Slots (--parallel).");
  value("tensorpc_slots_total", s.slots);
  metric("tensorpc_decode_steps_total", "counter",
         "Slots' decode steps: one slot's token, and with --lookup its draft, in a batched pass.");
  value("tensorpc_decode_steps_total", static_cast<double>(s.decode_steps));
  metric("tensorpc_decode_tokens_total", "counter",
         "Tokens the decode steps gave (more than one a step with --lookup).");
  value("tensorpc_decode_tokens_total", static_cast<double>(s.decoded_tokens));
  metric("tensorpc_tokens_per_decode_step", "gauge",
         "Decode tokens per decode step, since the start (1 without --lookup).");
  value("tensorpc_tokens_per_decode_step",
        s.decode_steps > 0 ? static_cast<double>(s.decoded_tokens) / static_cast<double>(s.decode_steps) : 0);
  metric("tensorpc_draft_tokens_total", "counter", "Draft tokens evaluated (--lookup).");
  value("tensorpc_draft_tokens_total", static_cast<double>(s.draft_tokens));
  metric("tensorpc_draft_accepted_total", "counter", "Draft tokens the sampler picked as drafted (--lookup).");
  value("tensorpc_draft_accepted_total", static_cast<double>(s.draft_accepted));
  if (model_.endpoints.empty()) return out;
  const RecoveryView r = model_.recovery ? model_.recovery() : RecoveryView{};
  metric("tensorpc_recoveries_total", "counter", "Lost servers recovered from (the generation went on).");
  value("tensorpc_recoveries_total", static_cast<double>(r.recoveries));
  metric("tensorpc_recovery_failures_total", "counter", "Recoveries that found nothing to take a lost server's place.");
  value("tensorpc_recovery_failures_total", static_cast<double>(r.failures));
  metric("tensorpc_recovery_seconds_total", "counter", "Seconds spent recovering, the replays included.");
  value("tensorpc_recovery_seconds_total", r.seconds);
  metric("tensorpc_recovery_tokens_replayed_total", "counter", "Tokens evaluated again to rebuild the KV cache.");
  value("tensorpc_recovery_tokens_replayed_total", static_cast<double>(r.tokens_replayed));
  metric("tensorpc_recovering", "gauge", "1 while a lost server is being recovered from.");
  value("tensorpc_recovering", r.health == "recovering" ? 1 : 0);
  metric("tensorpc_server_round_trips_total", "counter", "Requests to the server that waited for its answer.");
  metric("tensorpc_server_bytes_sent_total", "counter", "Bytes sent to the server, frame headers included.");
  metric("tensorpc_server_bytes_received_total", "counter", "Bytes received from the server.");
  metric("tensorpc_server_last_round_trip_seconds", "gauge",
         "The last request that waited: sent to answered, the server's work included.");
  for (const std::string& ep : model_.endpoints) {
    const ConnectionStats c = connection_stats(ep);
    const std::string label = "{server=\"" + ep + "\"}";
    value("tensorpc_server_round_trips_total" + label, static_cast<double>(c.round_trips));
    value("tensorpc_server_bytes_sent_total" + label, static_cast<double>(c.bytes_sent));
    value("tensorpc_server_bytes_received_total" + label, static_cast<double>(c.bytes_received));
    value("tensorpc_server_last_round_trip_seconds" + label, static_cast<double>(c.last_round_trip_ns) * 1e-9);
  }
  return out;
}

std::string HttpRoutes::cluster() const {
  const ClusterView v = model_.cluster ? model_.cluster() : ClusterView{};
  json devices = json::array();
  for (const DeviceView& d : v.devices) {
    json layers = d.first_layer >= 0 ? json::array({d.first_layer, d.last_layer}) : json::array();
    devices.push_back({{"name", d.name},
                       {"endpoint", d.endpoint},
                       {"index", d.index},
                       {"layers", layers},
                       {"embedding", d.embedding},
                       {"output", d.output},
                       {"memory_total", d.memory_total},
                       {"memory_free", d.memory_free}});
  }
  return json{
      {"model", v.model}, {"n_layer", v.n_layer}, {"n_ctx", v.n_ctx}, {"parallel", v.parallel}, {"devices", devices}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tensorpc::serve

namespace tensorpc::serve {

void HttpRoutes::messages(const std::string& body, std::shared_ptr<Responder> out) {
  if (auto e = not_ready()) return out->reply(MessageExchange::error(*e));
  thread_local std::mt19937_64 seeds(std::random_device{}());
  auto parsed = parse_messages_request(body, seeds());
  if (auto* e = std::get_if<ApiError>(&parsed)) return out->reply(MessageExchange::error(*e));
  MessagesRequest r = std::move(std::get<MessagesRequest>(parsed));
  const auto refuse = [&](std::string param, std::string message) {
    out->reply(MessageExchange::error(invalid_request("invalid_value", std::move(param), std::move(message))));
  };
  if (!r.model.empty() && r.model != model_id_) {
    return out->reply(MessageExchange::error(
        {.status = 404,
         .type = {},
         .message = "the model '" + r.model + "' is not served here; this server serves '" + model_id_ + "'",
         .code = {},
         .param = "model"}));
  }
  if (!model_.chat_template) {
    return refuse("messages",
                  "this model has no chat template tensorpc understands (" + model_.chat_template_error + ")");
  }
  Engine& engine = *model_.engine;
  const Tokenizer& tok = engine.model().tokenizer();
  auto tools = plan_tools(*model_.chat_template, r.tools, r.tool_choice, r.tool_choice_name, r.parallel_tool_calls);
  if (!tools.ok()) return refuse("tools", tools.status().message());
  auto tokens = conversation_tokens(*model_.chat_template, r.messages, *tools, tok, engine.slot_context());
  if (!tokens.ok()) return refuse("messages", tokens.status().message());
  Request work;
  work.prompt = std::move(tokens).value();
  if (Status s = check_prompt_fits(work.prompt.size(), engine.slot_context()); !s.ok()) {
    return refuse("messages", s.message());
  }
  work.max_tokens = r.max_tokens;
  work.sampler = r.sampler;
  work.stop = r.stop;
  work.special_text = tools->special_text();
  if (Status s = constrain(tools->grammar, work.sampler); !s.ok()) return refuse("tools", s.message());
  auto ex = std::make_shared<MessageExchange>();
  if (tools->active()) ex->tools.emplace(*tools);
  ex->out = out;
  ex->id = request_id("msg_");
  ex->model = model_id_;
  ex->stream = r.stream;
  ex->input_tokens = static_cast<int64_t>(work.prompt.size());
  work.cancel = out->gone();
  work.on_text = [ex](std::string_view piece) { return ex->on_text(piece); };
  work.on_done = [ex](const Outcome& o) { ex->on_done(o); };
  if (const Status s = engine.submit(std::move(work)); !s.ok()) {
    if (s.code() == StatusCode::out_of_memory)
      return out->reply(MessageExchange::error(unavailable_error(s.message())));
    return refuse("", s.message());
  }
  if (ex->stream) ex->begin_stream();
}

}  // namespace tensorpc::serve

namespace tensorpc::serve {

OllamaModelInfo HttpRoutes::ollama_model() const {
  const LlamaModel& m = model_.engine->model();
  return OllamaModelInfo{
      .name = model_id_,
      .architecture = std::string(m.arch().name),
      .parameters = m.parameter_count(),
      .file_bytes = model_.file_bytes,
      .context = model_.engine->slot_context(),
      .chat_template = model_.chat_template ? std::string(model_.chat_template->name()) : std::string()};
}

void HttpRoutes::ollama(bool chat, const std::string& body, std::shared_ptr<Responder> out) {
  if (auto e = not_ready()) return out->reply(OllamaExchange::error(*e));
  thread_local std::mt19937_64 seeds(std::random_device{}());
  auto parsed = parse_ollama_request(chat, body, seeds());
  if (auto* e = std::get_if<ApiError>(&parsed)) return out->reply(OllamaExchange::error(*e));
  OllamaRequest r = std::move(std::get<OllamaRequest>(parsed));
  const auto refuse = [&](std::string message) {
    out->reply(OllamaExchange::error(invalid_request("invalid_value", "", std::move(message))));
  };
  if (!r.model.empty() && r.model != model_id_ && r.model != model_id_ + ":latest") {
    return out->reply(
        OllamaExchange::error({.status = 404,
                               .type = "not_found_error",
                               .message = "model '" + r.model + "' not found; this server serves '" + model_id_ + "'",
                               .code = {},
                               .param = "model"}));
  }
  Engine& engine = *model_.engine;
  if (r.num_ctx > engine.slot_context()) {
    return refuse("options.num_ctx is " + std::to_string(r.num_ctx) + ": a slot holds " +
                  std::to_string(engine.slot_context()) + " positions (-c)");
  }
  const Tokenizer& tok = engine.model().tokenizer();
  std::string text;
  ToolPlan tools;
  if (!chat && r.raw) {
    text = r.prompt;
  } else if (model_.chat_template) {
    auto plan = plan_tools(*model_.chat_template, r.tools, ToolChoice::automatic, {}, /*parallel=*/true);
    if (!plan.ok()) return refuse(plan.status().message());
    tools = std::move(plan).value();
    if (tools.active() && !r.grammar.empty()) return refuse("'format' cannot be combined with 'tools'");
    auto rendered = render_with_tools(*model_.chat_template, r.messages, tools);
    if (!rendered.ok()) return refuse(rendered.status().message());
    text = std::move(rendered).value();
  } else if (!chat) {
    text = r.prompt;  // no template: a completion of the prompt
  } else {
    return refuse("this model has no chat template tensorpc understands (" + model_.chat_template_error + ")");
  }
  if (Status s = check_prompt_bytes(text.size(), tok, engine.slot_context()); !s.ok()) return refuse(s.message());
  Request work;
  const bool templated = !(!chat && r.raw) && model_.chat_template;
  work.prompt = templated ? templated_tokens(tok, text) : tok.encode(text, /*add_special=*/true, false);
  if (work.prompt.empty()) return refuse("the prompt has no tokens");
  if (Status s = check_prompt_fits(work.prompt.size(), engine.slot_context()); !s.ok()) return refuse(s.message());
  work.max_tokens = r.max_tokens;
  work.sampler = r.sampler;
  work.stop = r.stop;
  if (Status s = constrain(r.grammar, work.sampler); !s.ok()) return refuse(s.message());
  work.special_text = tools.special_text();
  auto ex = std::make_shared<OllamaExchange>();
  if (tools.active()) ex->tools.emplace(tools);
  ex->out = out;
  ex->model = r.model.empty() ? model_id_ : r.model;
  ex->chat = chat;
  ex->stream = r.stream;
  work.cancel = out->gone();
  work.on_text = [ex](std::string_view piece) { return ex->on_text(piece); };
  work.on_done = [ex](const Outcome& o) { ex->on_done(o); };
  if (const Status s = engine.submit(std::move(work)); !s.ok()) {
    if (s.code() == StatusCode::out_of_memory) return out->reply(OllamaExchange::error(unavailable_error(s.message())));
    return refuse(s.message());
  }
  if (ex->stream) ex->begin_stream();
}

}  // namespace tensorpc::serve

namespace tensorpc::serve {

Status HttpRoutes::constrain(const std::string& gbnf, SamplerOptions& sampler) {
  if (gbnf.empty()) return Status();
  TENSORPC_ASSIGN_OR_RETURN(sampler.grammar, Grammar::parse(gbnf));
  sampler.grammar_vocabulary = grammar_vocabulary();
  return Status();
}

std::shared_ptr<const GrammarVocabulary> HttpRoutes::grammar_vocabulary() {
  // Made once, on the first request with a grammar: the vocabulary's trie.
  std::call_once(vocabulary_once_,
                 [&] { vocabulary_ = std::make_shared<const GrammarVocabulary>(model_.engine->model().tokenizer()); });
  return vocabulary_;
}

}  // namespace tensorpc::serve

namespace tensorpc::serve {

void HttpRoutes::embeddings(bool ollama, const std::string& body, std::shared_ptr<Responder> out) {
  const auto fail = [ollama, out](const ApiError& e) {
    if (ollama) return out->reply(OllamaExchange::error(e));
    out->reply(e.status == 503 ? retry_later(e) : error_reply(e));
  };
  if (auto e = not_ready()) return fail(*e);
  auto parsed = ollama ? parse_ollama_embed_request(body) : parse_embeddings_request(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return fail(*e);
  EmbeddingsRequest r = std::move(std::get<EmbeddingsRequest>(parsed));
  if (!r.model.empty() && r.model != model_id_ && !(ollama && r.model == model_id_ + ":latest")) {
    return fail({.status = ollama ? 404 : 400,
                 .type = ollama ? "not_found_error" : "invalid_request_error",
                 .message = "the model '" + r.model + "' is not served here; this server serves '" + model_id_ + "'",
                 .code = "model_not_found",
                 .param = "model"});
  }
  Engine& engine = *model_.engine;
  const int64_t n_embd = engine.model().hparams().n_embd;
  if (r.dimensions != 0 && r.dimensions != n_embd) {
    return fail(invalid_request("invalid_value", "dimensions",
                                "'dimensions' is " + std::to_string(r.dimensions) + ": this model's embeddings have " +
                                    std::to_string(n_embd) + " (tensorpc does not shorten them)"));
  }
  const Tokenizer& tok = engine.model().tokenizer();
  const int64_t context = engine.slot_context();
  EmbedRequest work;
  work.inputs = std::move(r.tokens);
  const size_t n = r.is_tokens ? work.inputs.size() : r.texts.size();
  int64_t prompt_tokens = 0;
  const bool cut = ollama && r.truncate;  // Ollama's default: what the context cannot hold is dropped
  for (size_t i = 0; i < n; ++i) {
    std::string param = "input";
    if (n > 1) {
      param += "[";
      param += std::to_string(i);
      param += "]";
    }
    if (!r.is_tokens) {
      const Status s = cut ? Status() : check_prompt_bytes(r.texts[i].size(), tok, context);
      if (!s.ok()) return fail(invalid_request("context_length_exceeded", param, s.message()));
      work.inputs.push_back(tok.encode(r.texts[i], /*add_special=*/true, /*parse_special=*/false));
      if (work.inputs.back().empty()) return fail(invalid_request("invalid_value", param, "the text has no tokens"));
    }
    std::vector<int32_t>& tokens = work.inputs[i];
    if (static_cast<int64_t>(tokens.size()) > context) {
      if (!cut) {
        return fail(invalid_request("context_length_exceeded", param,
                                    "the input has " + std::to_string(tokens.size()) + " tokens; the context holds " +
                                        std::to_string(context)));
      }
      tokens.resize(static_cast<size_t>(context));
    }
    prompt_tokens += static_cast<int64_t>(tokens.size());
  }
  const auto started = std::chrono::steady_clock::now();
  work.cancel = out->gone();
  work.on_done = [=, model = r.model.empty() || !ollama ? model_id_ : r.model,
                  base64 = r.base64](StatusOr<std::vector<std::vector<float>>> vectors) {
    if (!vectors.ok()) {
      const bool lost = vectors.status().code() == StatusCode::unavailable;
      return fail(lost ? unavailable_error(vectors.status().message())
                       : api_error(500, "server_error", "embedding_failed", vectors.status().to_string()));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    out->reply({.status = 200,
                .content_type = "application/json",
                .body = ollama ? ollama_embed_json(model, vectors.value(), prompt_tokens, seconds)
                               : embeddings_json(model, vectors.value(), base64, prompt_tokens),
                .headers = {}});
  };
  if (const Status s = engine.submit_embedding(std::move(work)); !s.ok()) {
    if (s.code() == StatusCode::out_of_memory) return fail(unavailable_error(s.message()));
    return fail(invalid_request("invalid_value", "input", s.message()));
  }
}

}  // namespace tensorpc::serve
