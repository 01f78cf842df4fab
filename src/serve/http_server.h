// HttpServer: the HTTP front of `tensorpc serve`, event-driven on Boost.Beast
// and Asio. One thread runs the event loop that owns every connection
// (http_connection.h); a few workers run the routes that cost more than a
// moment (http_routes.h: tokenizing a prompt, asking the servers for
// figures). A connection costs memory, not a thread, while it waits; each
// limit is one setting below, checked before work is done.
//
// It listens before the model is loaded: until set_model() the API answers
// 503 and /health says what is being done.
//
// Ownership: the server borrows the engine (set_model), which must outlive
// every request in flight: stop() the server before destroying the engine.
// stop() ends listen() and may be called from any thread, also before
// listen() runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serve/http_routes.h"
#include "tensorpc/status.h"

namespace tensorpc::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (port() says which)
  std::string api_key;              // empty: no key asked
  std::string model_id;             // the name /v1/models lists and requests may give
  std::string tls_cert, tls_key;    // both set: HTTPS only
  uint64_t max_body = 4u << 20;     // bytes of a request body at most, whatever its encoding (413 beyond)
  double header_timeout_s = 10;     // a request's header whole within this from its first byte
  double keep_alive_timeout_s = 5;  // a connection with no request begun closes after this
  int max_connections = 1024;       // open at once; beyond, a new one is answered 503 and closed
  int workers = 0;                  // threads running the routes that are not quick; 0: 4
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the address; an error names it (in use, not an address here, a
  // certificate that cannot be used, too few open files for max_connections).
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
  class Loop;
  HttpOptions options_;
  HttpRoutes routes_;
  std::unique_ptr<Loop> loop_;
  int port_ = 0;
};

}  // namespace tensorpc::serve
