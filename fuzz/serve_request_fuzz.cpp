// libFuzzer target: arbitrary bytes as the body of an OpenAI chat or
// completion request, as `tensorpc serve` meets one. Parsing must never
// crash or throw: a body is refused with a 400 ApiError, or every field of
// the request is within the ranges openai_request.h promises. Whatever comes
// out is formatted (errors, whole responses, stream events, with the
// request's own text, which may hold any bytes), and each formatting must
// parse back as JSON. The request's text is also run through a StopMatcher
// with its stop strings, in pieces cut by the input's bytes, which must give
// what a naive search for the first stop string gives. The same bytes as an
// embeddings request (OpenAI's and Ollama's): refused with a 400, or inputs
// none of them empty, within kMaxEmbeddingInputs, their answers JSON. The
// request's text read as a model's reply by the tool call parser of each
// syntax, in pieces cut by the input's bytes, must give what the reply read
// whole gives, and its calls must format as JSON.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/runtime/tool_calls.h"
#include "serve/embeddings_api.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/stop_strings.h"

namespace {

using namespace tensorpc::serve;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "serve_request_fuzz: %s\n", what);
  std::abort();
}

void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

// Formatted output must be JSON; an event must be one "data: ...\n\n" line.
void check_json(std::string_view text) {
  check(!nlohmann::json::parse(text, nullptr, false).is_discarded(), "formatted output is not JSON");
}

void check_event(std::string_view event) {
  check(event.starts_with("data: ") && event.ends_with("\n\n"), "an event is not framed as data: ...\\n\\n");
  const std::string_view payload = event.substr(6, event.size() - 8);
  check(payload.find('\n') == std::string_view::npos, "an event spans lines");
  check_json(payload);
}

void check_error(const ApiError& error) {
  check(error.status == 400 && error.type == "invalid_request_error", "a parse error is not a 400 invalid request");
  check(!error.message.empty() && !error.code.empty(), "a parse error says nothing");
  check_json(error_json(error));
  check_event(error_event(error));
}

void check_request(const CompletionRequest& r, Endpoint endpoint) {
  check(r.endpoint == endpoint, "wrong endpoint");
  if (endpoint == Endpoint::chat) {
    check(!r.messages.empty(), "a chat without messages");
    for (const auto& m : r.messages) {
      check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
            "a message of another role");
      check(m.tool_calls.empty() || m.role == "assistant", "tool calls in a message not the assistant's");
    }
    check((r.tool_choice == ToolChoice::none) == r.tools.empty() || r.tool_choice == ToolChoice::none,
          "tools without a tool_choice");
    bool named = r.tool_choice != ToolChoice::function;
    for (const auto& t : r.tools) {
      check(!t.name.empty() && t.name.size() <= 64, "a tool name out of range");
      check(!nlohmann::json::parse(t.parameters, nullptr, false).is_discarded(), "a tool's parameters are not JSON");
      check(!nlohmann::json::parse(t.tool_json, nullptr, false).is_discarded(), "a tool's JSON is not JSON");
      named = named || t.name == r.tool_choice_name;
    }
    check(named, "tool_choice names a function that is not a tool");
    check(r.tools.empty() || r.tool_choice == ToolChoice::none || r.grammar.empty(), "tools with a response_format");
  } else if (r.prompt_is_tokens) {
    check(!r.prompt_tokens.empty() && r.prompt.empty(), "token prompt and text prompt mixed");
    for (const int32_t id : r.prompt_tokens) check(id >= 0, "a negative token id");
  } else {
    check(!r.prompt.empty() && r.prompt_tokens.empty(), "an empty text prompt");
  }
  check(r.max_tokens == -1 || r.max_tokens >= 1, "max_tokens out of range");
  check(r.sampler.validate().ok(), "sampler options out of range");
  check(r.sampler.temperature <= 2.0f, "temperature above 2");
  check(r.seed_given || r.sampler.seed == 7, "the default seed was not used");
  check(r.stop.size() <= 4, "more than 4 stop strings");
  for (const std::string& stop : r.stop) check(!stop.empty(), "an empty stop string");
  check(!r.include_usage || r.stream, "include_usage without streaming");
  check(!r.echo, "echo accepted");
}

// The text before the stop string that ends first (the longest of those
// ending at the same byte), or all of it.
std::string cut_at_first_stop(const std::vector<std::string>& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t longest = 0;
    for (const std::string& stop : stops) {
      if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0) {
        longest = std::max(longest, stop.size());
      }
    }
    if (longest > 0) return text.substr(0, end - longest);
  }
  return text;
}

// Streams `text` in pieces whose lengths come from `cuts`, as the server
// would: through the stop matcher into chunk events, then the whole answer.
void stream_text(const CompletionRequest& r, const std::string& text, std::string_view cuts) {
  StopMatcher matcher(r.stop);
  std::string emitted;
  bool stopped = false;
  size_t at = 0;
  for (size_t i = 0; at < text.size() && !stopped; ++i) {
    const size_t n = i < cuts.size() ? static_cast<unsigned char>(cuts[i]) % 8 : text.size() - at;
    const StopMatcher::Result result = matcher.push(std::string_view(text).substr(at, n));
    at += std::min(n, text.size() - at);
    stopped = result.stopped;
    emitted += result.emit;
    if (r.endpoint == Endpoint::chat) {
      check_event(chat_chunk_event("chatcmpl-x", 1, r.model, result.emit, i == 0, std::nullopt, r.include_usage));
    } else {
      check_event(text_chunk_event("cmpl-x", 1, r.model, result.emit, std::nullopt, r.include_usage));
    }
  }
  emitted += matcher.flush();
  check(emitted == cut_at_first_stop(r.stop, text), "the stop matcher disagrees with a plain search");

  const FinishReason finish = stopped ? FinishReason::stop : FinishReason::length;
  const Usage usage{.prompt_tokens = static_cast<int64_t>(text.size()),
                    .completion_tokens = static_cast<int64_t>(emitted.size())};
  if (r.endpoint == Endpoint::chat) {
    check_event(chat_chunk_event("chatcmpl-x", 1, r.model, "", false, finish, r.include_usage));
    check_json(chat_completion_json("chatcmpl-x", 1, r.model, emitted, finish, usage));
  } else {
    check_event(text_chunk_event("cmpl-x", 1, r.model, "", finish, r.include_usage));
    check_json(text_completion_json("cmpl-x", 1, r.model, emitted, finish, usage));
  }
  check_event(usage_chunk_event(r.endpoint, "x", 1, r.model, usage));
  check_json(models_json(r.model, 1, r.user));
}

void check_embeddings(const std::variant<EmbeddingsRequest, ApiError>& result) {
  if (const ApiError* error = std::get_if<ApiError>(&result)) return check_error(*error);
  const EmbeddingsRequest& r = std::get<EmbeddingsRequest>(result);
  const size_t n = r.is_tokens ? r.tokens.size() : r.texts.size();
  check(n > 0 && n <= kMaxEmbeddingInputs && r.texts.size() + r.tokens.size() == n, "embedding inputs out of range");
  for (const auto& t : r.texts) check(!t.empty(), "an empty text to embed");
  for (const auto& t : r.tokens) {
    check(!t.empty(), "an empty token list to embed");
    for (int32_t id : t) check(id >= 0, "a negative token id");
  }
  check(r.dimensions >= 0, "negative dimensions");
  const std::vector<std::vector<float>> vectors(n, std::vector<float>{0.5f, -1.0f, 1e-30f});
  check_json(embeddings_json(r.model, vectors, r.base64, 3));
  check_json(ollama_embed_json(r.model, vectors, 3, 0.25));
}

// `text` as a reply in each tool syntax, whole and in pieces, and its calls formatted.
void read_tool_calls(const std::string& text, std::string_view cuts) {
  using tensorpc::ToolCallEvent;
  for (const tensorpc::ToolSyntax syntax : {tensorpc::ToolSyntax::hermes, tensorpc::ToolSyntax::llama3_json,
                                            tensorpc::ToolSyntax::mistral}) {
    for (const bool forced : {false, true}) {
      const tensorpc::ParsedReply whole = tensorpc::parse_reply(syntax, text, forced);
      tensorpc::ToolCallParser parser(syntax, forced);
      std::vector<ToolCallEvent> events;
      for (size_t at = 0, i = 0; at < text.size(); ++i) {
        const size_t n = std::min<size_t>(i < cuts.size() ? static_cast<unsigned char>(cuts[i]) % 8 + 1 : 64,
                                          text.size() - at);
        parser.feed(std::string_view(text).substr(at, n), events);
        at += n;
      }
      parser.finish(events);
      std::string content;
      std::vector<tensorpc::ToolCall> calls;
      for (const ToolCallEvent& e : events) {
        if (e.kind == ToolCallEvent::Kind::content) content += e.text;
        if (e.kind == ToolCallEvent::Kind::call) calls.push_back({.id = "call_x", .name = e.text, .arguments = {}});
        if (e.kind == ToolCallEvent::Kind::arguments) {
          check(e.index >= 0 && static_cast<size_t>(e.index) < calls.size(), "arguments of a call not begun");
          calls[static_cast<size_t>(e.index)].arguments += e.text;
        }
      }
      check(content == whole.content, "tool call parsing: content read in pieces differs from whole");
      check(calls.size() == whole.calls.size(), "tool call parsing: calls read in pieces differ from whole");
      for (size_t k = 0; k < calls.size(); ++k) {
        check(calls[k].name == whole.calls[k].name && calls[k].arguments == whole.calls[k].arguments,
              "tool call parsing: a call read in pieces differs from whole");
      }
      check_json(chat_completion_json("c", 1, "m", {Choice{content, FinishReason::tool_calls, nullptr, &calls}}, {}));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const Endpoint endpoint : {Endpoint::chat, Endpoint::completion}) {
    auto result = parse_completion_request(endpoint, body, 7);
    if (const ApiError* error = std::get_if<ApiError>(&result)) {
      check_error(*error);
      continue;
    }
    const CompletionRequest& request = std::get<CompletionRequest>(result);
    check_request(request, endpoint);
    std::string text = request.prompt;
    for (const auto& message : request.messages) text += message.content;
    // The request's text as a model's output, which may end mid-character.
    text += std::string(body.substr(0, std::min<size_t>(body.size(), 16)));
    stream_text(request, text, body);
    read_tool_calls(text, body);
  }
  check_embeddings(parse_embeddings_request(body));
  check_embeddings(parse_ollama_embed_request(body));
  return 0;
}
