// The HTTP routes of `tensorpc serve` (http_server.h).
#include "serve/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/web_assets.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::serve {
namespace {

using json = nlohmann::json;

ApiError api_error(int status, std::string type, std::string code, std::string message) {
  return ApiError{.status = status, .type = std::move(type), .message = std::move(message), .code = std::move(code), .param = {}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_json(e), "application/json");
}

ApiError unavailable_error(std::string message) {
  return api_error(503, "server_error", "unavailable", std::move(message));
}

// The label of a path in tensorpc_requests_total.
std::string endpoint_label(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/models") return "models";
  if (path == "/v1/cluster") return "cluster";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  for (const WebAsset& a : web_assets()) {
    if (path == a.path) return "page";
  }
  return "other";
}

// A request's text and end, handed from the engine's thread to the
// connection's.
struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
  std::string text;  // not yet sent (streaming) or all of it
  std::optional<Outcome> done;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
};

FinishReason finish_reason(Finish f) { return f == Finish::length ? FinishReason::length : FinishReason::stop; }

std::string request_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return std::string(prefix) + buf;
}

}  // namespace

class HttpServer::Routes {
 public:
  explicit Routes(const HttpOptions& options) : options_(options) {}

  void install(httplib::Server& http);
  void set_loading(std::string what) {
    std::lock_guard lock(mu_);
    loading_ = std::move(what);
  }
  void set_failed(std::string why) {
    std::lock_guard lock(mu_);
    failed_ = std::move(why);
  }
  void set_model(ServedModel model) {
    std::lock_guard lock(mu_);
    model_ = std::move(model);
    ready_.store(true);
  }

 private:
  // The model when ready; else the 503 to answer with.
  std::optional<ApiError> not_ready() const;
  bool authorized(const httplib::Request& req) const;
  void completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void count(const httplib::Request& req, const httplib::Response& res);
  std::string metrics() const;
  std::string cluster() const;

  const HttpOptions& options_;
  mutable std::mutex mu_;
  std::string loading_ = "starting";  // guarded by mu_
  std::string failed_;                // guarded by mu_
  ServedModel model_;                 // set once, before ready_
  std::atomic<bool> ready_{false};
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // guarded by mu_: (endpoint, status) -> count
  const int64_t started_ = static_cast<int64_t>(std::time(nullptr));
};

std::optional<ApiError> HttpServer::Routes::not_ready() const {
  if (ready_.load()) return std::nullopt;
  std::lock_guard lock(mu_);
  if (!failed_.empty()) return unavailable_error("the model failed to load: " + failed_);
  return unavailable_error("the model is loading: " + loading_);
}

bool HttpServer::Routes::authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string want = "Bearer " + options_.api_key;
  // Constant time over the key: the comparison does not stop at the first difference.
  return header.size() == want.size() && CRYPTO_memcmp(header.data(), want.data(), want.size()) == 0;
}

void HttpServer::Routes::count(const httplib::Request& req, const httplib::Response& res) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint_label(req.path), res.status}];
}

void HttpServer::Routes::install(httplib::Server& http) {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool open = req.path == "/health" || endpoint_label(req.path) == "page";
    if (open || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, api_error(401, "authentication_error", "invalid_api_key",
                              req.has_header("Authorization") ? "the API key is wrong"
                                                              : "an API key is needed: Authorization: Bearer KEY"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (404, 413, 400 for a malformed request line) get an OpenAI body too.
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, api_error(404, "not_found_error", "not_found", "no route for " + req.method + " " + req.path));
    } else if (res.status == 413) {
      send_error(res, api_error(413, "invalid_request_error", "body_too_large", "the request body is too large"));
    } else {
      send_error(res, api_error(res.status, res.status >= 500 ? "server_error" : "invalid_request_error", "",
                                res.status == 400 ? "the HTTP request is malformed (a POST needs a JSON body)"
                                                  : "HTTP " + std::to_string(res.status)));
    }
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, api_error(500, "server_error", "internal_error", "internal error: " + what));
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { count(req, res); });

  for (const WebAsset& a : web_assets()) {
    http.Get(std::string(a.path), [a](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(a.body), std::string(a.content_type));
    });
  }
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = not_ready()) {
      res.status = 503;
      res.set_header("Retry-After", "1");
      res.set_content(json{{"status", "loading"}, {"message", e->message}}.dump(), "application/json");
      return;
    }
    const EngineStats s = model_.engine->stats();
    json body{{"status", "ok"}, {"slots_idle", s.slots - s.active}, {"slots_busy", s.active}, {"queued", s.queued}};
    if (!s.last_error.empty()) body["last_error"] = s.last_error;
    res.set_content(body.dump(), "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(models_json(options_.model_id, started_, "tensorpc"), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/cluster", [this](const httplib::Request&, httplib::Response& res) {
    if (auto e = not_ready()) return send_error(res, *e);
    res.set_content(cluster(), "application/json");
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(Endpoint::chat, req, res);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(Endpoint::completion, req, res);
  });
}

void HttpServer::Routes::completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  if (auto e = not_ready()) {
    res.set_header("Retry-After", "1");
    return send_error(res, *e);
  }
  thread_local std::mt19937_64 seeds(std::random_device{}());
  auto parsed = parse_completion_request(endpoint, req.body, seeds());
  if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
  CompletionRequest r = std::move(std::get<CompletionRequest>(parsed));
  if (!r.model.empty() && r.model != options_.model_id) {
    ApiError e = invalid_request("model_not_found", "model",
                                 "the model '" + r.model + "' is not served here; this server serves '" +
                                     options_.model_id + "'");
    return send_error(res, e);
  }
  Engine& engine = *model_.engine;
  const Tokenizer& tok = engine.model().tokenizer();
  Request work;
  if (endpoint == Endpoint::chat) {
    if (!model_.chat_template) {
      return send_error(res, invalid_request("no_chat_template", "messages",
                                             "this model has no chat template tensorpc understands (" +
                                                 model_.chat_template_error + "); use /v1/completions"));
    }
    auto rendered = model_.chat_template->render(r.messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return send_error(res, invalid_request("invalid_value", "messages", rendered.status().message()));
    work.prompt = tok.encode(rendered.value(), /*add_special=*/false, /*parse_special=*/true);
    if (tok.add_bos() && tok.bos() >= 0 && (work.prompt.empty() || work.prompt.front() != tok.bos())) {
      work.prompt.insert(work.prompt.begin(), tok.bos());
    }
  } else if (r.prompt_is_tokens) {
    work.prompt = std::move(r.prompt_tokens);
  } else {
    work.prompt = tok.encode(r.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  if (static_cast<int64_t>(work.prompt.size()) >= engine.slot_context()) {
    return send_error(res, invalid_request("context_length_exceeded", endpoint == Endpoint::chat ? "messages" : "prompt",
                                           "the prompt has " + std::to_string(work.prompt.size()) +
                                               " tokens; the context holds " + std::to_string(engine.slot_context()) +
                                               " (prompt and reply together)"));
  }
  work.max_tokens = r.max_tokens;
  work.sampler = r.sampler;
  work.stop = r.stop;

  auto ex = std::make_shared<Exchange>();
  work.cancel = ex->cancel;
  work.on_text = [ex](std::string_view piece) {
    std::lock_guard lock(ex->mu);
    ex->text += piece;
    ex->cv.notify_all();
    return !ex->cancel->load();
  };
  work.on_done = [ex](const Outcome& o) {
    std::lock_guard lock(ex->mu);
    ex->done = o;
    ex->cv.notify_all();
  };
  if (const Status s = engine.submit(std::move(work)); !s.ok()) {
    if (s.code() == StatusCode::out_of_memory) {
      res.set_header("Retry-After", "1");
      return send_error(res, unavailable_error(s.message()));
    }
    return send_error(res, invalid_request("invalid_value", "", s.message()));
  }

  const std::string id = request_id(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-");
  const auto created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = options_.model_id;
  const auto usage_of = [](const Outcome& o) { return Usage{o.prompt_tokens, o.completion_tokens}; };

  if (!r.stream) {
    std::unique_lock lock(ex->mu);
    ex->cv.wait(lock, [&] { return ex->done.has_value(); });
    const Outcome& o = *ex->done;
    if (o.finish == Finish::error) {
      return send_error(res, api_error(500, "server_error", "generation_failed", o.status.to_string()));
    }
    if (o.finish == Finish::cancelled) return send_error(res, unavailable_error("the server is shutting down"));
    res.set_content(endpoint == Endpoint::chat
                        ? chat_completion_json(id, created, model, ex->text, finish_reason(o.finish), usage_of(o))
                        : text_completion_json(id, created, model, ex->text, finish_reason(o.finish), usage_of(o)),
                    "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const bool usage = r.include_usage;
  auto first = std::make_shared<bool>(true);
  res.set_chunked_content_provider(
      "text/event-stream",
      [ex, endpoint, id, created, model, usage, first, usage_of](size_t, httplib::DataSink& sink) {
        const auto chunk = [&](std::string_view text, std::optional<FinishReason> finish) {
          std::string event = endpoint == Endpoint::chat
                                  ? chat_chunk_event(id, created, model, text, *first, finish, usage)
                                  : text_chunk_event(id, created, model, text, finish, usage);
          *first = false;
          return sink.write(event.data(), event.size());
        };
        if (*first && endpoint == Endpoint::chat && !chunk("", std::nullopt)) {
          ex->cancel->store(true);
          return false;
        }
        std::string text;
        std::optional<Outcome> done;
        {
          std::unique_lock lock(ex->mu);
          // Wake now and then to notice a client that hung up while nothing was said.
          ex->cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return !ex->text.empty() || ex->done; });
          text.swap(ex->text);
          done = ex->done;
        }
        if (!text.empty() && !chunk(text, std::nullopt)) {
          ex->cancel->store(true);
          return false;
        }
        if (!done) {
          // Nothing to say for a while (waiting for a slot, a slow step): an SSE
          // comment, which clients skip, and whose write fails once the client is gone.
          static constexpr std::string_view kPing = ": ping\n\n";
          if (text.empty() && sink.is_writable() && sink.write(kPing.data(), kPing.size())) return true;
          if (!text.empty() && sink.is_writable()) return true;
          ex->cancel->store(true);
          return false;
        }
        std::string tail;
        if (done->finish == Finish::error || done->finish == Finish::cancelled) {
          tail = error_event(done->finish == Finish::error
                                 ? api_error(500, "server_error", "generation_failed", done->status.to_string())
                                 : unavailable_error("the server is shutting down"));
        } else {
          tail = endpoint == Endpoint::chat
                     ? chat_chunk_event(id, created, model, "", false, finish_reason(done->finish), usage)
                     : text_chunk_event(id, created, model, "", finish_reason(done->finish), usage);
          if (usage) tail += usage_chunk_event(endpoint, id, created, model, usage_of(*done));
        }
        tail += done_event();
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      },
      [ex](bool success) {
        if (!success) ex->cancel->store(true);
      });
}

std::string HttpServer::Routes::metrics() const {
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
  metric("tensorpc_prompt_tokens_total", "counter", "Prompt tokens evaluated (those found in a slot's cache not counted).");
  value("tensorpc_prompt_tokens_total", static_cast<double>(s.prompt_tokens));
  metric("tensorpc_generated_tokens_total", "counter", "Tokens generated.");
  value("tensorpc_generated_tokens_total", static_cast<double>(s.generated_tokens));
  metric("tensorpc_tokens_per_second", "gauge", "Tokens generated per second over the last 5 seconds, all slots together.");
  value("tensorpc_tokens_per_second", s.tokens_per_second);
  metric("tensorpc_steps_total", "counter", "Batched forward passes run.");
  value("tensorpc_steps_total", static_cast<double>(s.steps));
  metric("tensorpc_queue_depth", "gauge", "Requests waiting for a slot.");
  value("tensorpc_queue_depth", s.queued);
  metric("tensorpc_slots_active", "gauge", "Slots generating.");
  value("tensorpc_slots_active", s.active);
  metric("tensorpc_slots_total", "gauge", "Slots (--parallel).");
  value("tensorpc_slots_total", s.slots);
  if (model_.endpoints.empty()) return out;
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

std::string HttpServer::Routes::cluster() const {
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
  return json{{"model", v.model},
              {"n_layer", v.n_layer},
              {"n_ctx", v.n_ctx},
              {"parallel", v.parallel},
              {"devices", devices}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

HttpServer::HttpServer(HttpOptions options) : options_(std::move(options)), routes_(std::make_unique<Routes>(options_)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
    if (options_.tls_cert.empty() || options_.tls_key.empty()) {
      return invalid_argument("--tls-cert and --tls-key go together");
    }
    auto tls = std::make_unique<httplib::SSLServer>(options_.tls_cert.c_str(), options_.tls_key.c_str());
    if (!tls->is_valid()) {
      return invalid_argument("the certificate " + options_.tls_cert + " or its key " + options_.tls_key +
                              " cannot be used");
    }
    http_ = std::move(tls);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  const size_t threads = options_.threads > 0 ? static_cast<size_t>(options_.threads) : 64;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body);
  http_->set_keep_alive_timeout(2);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  routes_->install(*http_);
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ < 0) return io_error("cannot listen on " + options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port)) {
      return io_error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                      " (in use, or not an address of this machine)");
    }
    port_ = options_.port;
  }
  return Status();
}

void HttpServer::listen() {
  if (http_) http_->listen_after_bind();
}

void HttpServer::stop() {
  if (http_) http_->stop();
}

void HttpServer::set_loading(std::string what) { routes_->set_loading(std::move(what)); }
void HttpServer::set_model(ServedModel model) { routes_->set_model(std::move(model)); }
void HttpServer::set_failed(std::string why) { routes_->set_failed(std::move(why)); }

}  // namespace tensorpc::serve
