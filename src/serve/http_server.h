// HttpServer: the HTTP face of `tensorpc serve` — the OpenAI-compatible API
// (/v1/chat/completions, /v1/completions, /v1/models), /health, /metrics in
// Prometheus' text format, /v1/cluster (where the model lies, for the page)
// and the web page at / (web_assets.h), over cpp-httplib.
//
// It listens before the model is loaded: until set_engine() hands it the
// engine, /health answers 503 with what is being done and the API answers
// 503 with Retry-After. Every request's body is parsed by
// openai_request.h; errors take OpenAI's shape ({"error": {...}}) with the
// status that says whose fault it was. A streamed answer is written by the
// connection's own thread from what the engine hands over; a client that
// hangs up has its request cancelled at the engine's next step.
//
// Ownership: the server borrows the engine (set_engine), which must outlive
// it; stop() ends listen() and may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/text/chat_template.h"
#include "serve/engine.h"
#include "tensorpc/status.h"

namespace httplib {
class Server;
}

namespace tensorpc::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (port() says which)
  std::string api_key;          // empty: no key asked
  size_t max_body = 4u << 20;   // bytes of a request body at most (413 beyond)
  std::string model_id;         // the name /v1/models lists and requests may give
  std::string tls_cert, tls_key;  // both set: HTTPS only
  int threads = 0;              // connections served at once; 0: 64
};

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

// What the server needs of the loaded model besides the engine.
struct ServedModel {
  Engine* engine = nullptr;
  std::optional<ChatTemplate> chat_template;  // none: /v1/chat/completions is refused
  std::string chat_template_error;            // why there is none
  std::vector<std::string> endpoints;         // the servers, for the per-server metrics
  std::function<ClusterView()> cluster;       // called per /v1/cluster request
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address; an error names it (in use, no permission, bad certificate).
  Status bind();
  int port() const { return port_; }
  // Serves until stop(); call after bind().
  void listen();
  void stop();

  // While loading: what /health says.
  void set_loading(std::string what);
  // The model is ready: the API serves it from now on.
  void set_model(ServedModel model);
  // Loading failed: /health says why, the API answers 503.
  void set_failed(std::string why);

 private:
  class Routes;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<Routes> routes_;
  int port_ = 0;
};

}  // namespace tensorpc::serve
