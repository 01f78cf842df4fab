// HttpRoutes: what `tensorpc serve` answers, apart from how HTTP reaches it —
// the OpenAI-compatible API (/v1/chat/completions, /v1/completions,
// /v1/embeddings, /v1/models), /health, /metrics in Prometheus' text format, /v1/cluster and
// the web page (web_assets.h). The front (http_front.h) parses the bytes,
// enforces the limits, checks the key and hands a route only a complete
// request; the route answers through a Responder, at once or later from the
// engine's thread, and never blocks waiting for generation.
//
// Routes are exact paths (a query string is ignored). Until set_model() the
// API answers 503 with Retry-After and /health says what is being done.
// Errors take OpenAI's shape ({"error": {...}}) with the status that says
// whose fault it was.
//
// Ownership: the routes borrow the engine (set_model), which must outlive
// every request handed to them.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/runtime/grammar_vocabulary.h"
#include "model/text/chat_template.h"
#include "serve/engine.h"
#include "serve/ollama_api.h"
#include "serve/openai_request.h"

namespace tensorpc::serve {

// Where each device is and what it holds, for /v1/cluster.
struct DeviceView {
  std::string name;
  std::string endpoint;  // "local" for this process's devices
  uint32_t index = 0;
  int64_t first_layer = -1, last_layer = -1;  // -1: no layer
  bool embedding = false, output = false;
  uint64_t memory_total = 0, memory_free = 0;
};
struct ClusterView {
  std::string model;
  int64_t n_layer = 0;
  int64_t n_ctx = 0;  // per slot
  int parallel = 0;
  std::vector<DeviceView> devices;
};

// What the recovery from lost servers is doing and has done, for /health
// and /metrics.
struct RecoveryView {
  std::string health = "ok";  // "ok", "recovering" or "degraded"
  std::string reason;         // naming the server
  bool serving = true;        // false after a recovery found nothing to take a lost server's place
  uint64_t recoveries = 0, failures = 0, tokens_replayed = 0;
  double seconds = 0;
};

// What the routes need of the loaded model besides the engine.
struct ServedModel {
  Engine* engine = nullptr;
  std::optional<ChatTemplate> chat_template;  // none: /v1/chat/completions is refused
  std::string chat_template_error;            // why there is none
  std::vector<std::string> endpoints;         // the servers, for the per-server metrics
  std::function<ClusterView()> cluster;       // called per /v1/cluster request
  std::function<RecoveryView()> recovery;     // per /health and /metrics request; may be empty
  uint64_t file_bytes = 0;                    // the model file's size, for /api/tags
};

// A whole answer.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type and Content-Length
};

HttpReply error_reply(const ApiError& e);

// The way back to the client of one request; its calls may come from any
// thread. Either reply() once, or start_events(), send() any number of
// times and end() once.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void reply(HttpReply reply) = 0;
  // A text/event-stream answer begins; while nothing is sent the front
  // writes an SSE comment now and then, which notices a client gone. With
  // `ndjson`, an application/x-ndjson answer (Ollama's), which has no
  // comments: a client gone shows at the next write.
  virtual void start_events(bool ndjson = false) = 0;
  virtual void send(std::string events) = 0;
  virtual void end(std::string events) = 0;
  // Set once the client is gone (hung up, stopped reading) or the front stops.
  virtual std::shared_ptr<std::atomic<bool>> gone() = 0;
};

// What a path is, for the front: its methods, whether it needs the key, and
// whether its answer is cheap enough to compute on the front's own thread.
struct RouteInfo {
  std::string_view path;
  bool get = false, post = false;
  bool open = false;       // answered without the API key (/health, the page)
  bool quick = false;      // answered on the front's thread; else on a worker
  std::string_view label;  // its name in tensorpc_requests_total
};

class HttpRoutes {
 public:
  HttpRoutes(std::string model_id, std::string api_key);

  // The route of an exact path; nullptr for none.
  const RouteInfo* find(std::string_view path) const;
  // Whether the Authorization header ("Bearer KEY") or the x-api-key header
  // (Anthropic's clients) carries the key (always true without a key).
  bool authorized(std::string_view authorization, std::string_view x_api_key = {}) const;
  // Answers a complete request to `route` (a method it takes; HEAD is answered
  // as GET, the front dropping the body) whose body is `body`.
  void handle(const RouteInfo& route, std::string body, std::shared_ptr<Responder> out);
  // Counts an answer in tensorpc_requests_total; label "other" for no route.
  void count(std::string_view label, int status);

  void set_loading(std::string what);
  void set_failed(std::string why);
  void set_model(ServedModel model);

 private:
  // The model when ready; else the 503 to answer with.
  std::optional<ApiError> not_ready() const;
  HttpReply health() const;
  void completion(Endpoint endpoint, const std::string& body, std::shared_ptr<Responder> out);
  // POST /v1/messages: Anthropic's Messages API (anthropic_api.h).
  void messages(const std::string& body, std::shared_ptr<Responder> out);
  // POST /api/chat and /api/generate: Ollama's API (ollama_api.h).
  void ollama(bool chat, const std::string& body, std::shared_ptr<Responder> out);
  OllamaModelInfo ollama_model() const;
  // POST /v1/embeddings, or with `ollama` POST /api/embed (embeddings_api.h).
  void embeddings(bool ollama, const std::string& body, std::shared_ptr<Responder> out);
  // The model's vocabulary for grammars (response_format), made on first use.
  std::shared_ptr<const GrammarVocabulary> grammar_vocabulary();
  // `sampler` follows the GBNF grammar `gbnf` (none when empty); its parse error otherwise.
  Status constrain(const std::string& gbnf, SamplerOptions& sampler);
  std::string metrics() const;
  std::string cluster() const;

  const std::string model_id_;
  const std::string api_key_;
  std::vector<RouteInfo> routes_;
  mutable std::mutex mu_;
  std::string loading_ = "starting";  // guarded by mu_
  std::string failed_;                // guarded by mu_
  ServedModel model_;                 // set once, before ready_
  std::atomic<bool> ready_{false};
  std::once_flag vocabulary_once_;
  std::shared_ptr<const GrammarVocabulary> vocabulary_;       // set once, under vocabulary_once_
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mu_: (label, status) -> count
  const int64_t started_ = static_cast<int64_t>(std::time(nullptr));
};

}  // namespace tensorpc::serve
