// The HTTP front of `tensorpc serve` (http_server.h): the listening socket,
// the event loop, the workers, TLS.
#include "serve/http_server.h"

#include <sys/resource.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <mutex>

#include "serve/http_connection.h"

namespace tensorpc::serve {
namespace {

using tcp = asio::ip::tcp;
using PlainConnection = HttpConnection<beast::tcp_stream>;
using TlsConnection = HttpConnection<beast::ssl_stream<beast::tcp_stream>>;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Files the process may open: raised to what max_connections needs, if the hard limit allows.
Status ensure_open_files(int max_connections) {
  const rlim_t need = static_cast<rlim_t>(max_connections) + 256;  // the model, the servers, the rest
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return Status();
  if (limit.rlim_cur >= need) return Status();
  rlimit raised = limit;
  raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? need : std::min(need, limit.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &raised) == 0 && raised.rlim_cur >= need) return Status();
  return invalid_argument("--max-connections " + std::to_string(max_connections) + " needs " + std::to_string(need) +
                          " open files; this process may open " + std::to_string(limit.rlim_max) +
                          " (ulimit -n): lower --max-connections or raise the limit");
}

}  // namespace

class HttpServer::Loop {
 public:
  Loop(const HttpOptions& options, HttpRoutes& routes)
      : options_(options), pool_(static_cast<size_t>(options.workers > 0 ? options.workers : 4)) {
    front_.limits.header_timeout = millis(options.header_timeout_s);
    front_.limits.keep_alive_timeout = millis(options.keep_alive_timeout_s);
    front_.limits.max_body = options.max_body;
    front_.routes = &routes;
    front_.work = pool_.get_executor();
  }

  Status bind(int* port) {
    TENSORPC_RETURN_IF_ERROR(ensure_open_files(options_.max_connections));
    if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
      if (options_.tls_cert.empty() || options_.tls_key.empty()) {
        return invalid_argument("--http-tls-cert and --http-tls-key go together");
      }
      tls_.emplace(asio::ssl::context::tls_server);
      tls_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
      beast::error_code ec;
      tls_->use_certificate_chain_file(options_.tls_cert, ec);
      if (!ec) tls_->use_private_key_file(options_.tls_key, asio::ssl::context::pem, ec);
      if (ec) {
        return invalid_argument("the certificate " + options_.tls_cert + " or its key " + options_.tls_key +
                                " cannot be used: " + ec.message());
      }
    }
    const std::string where = options_.host + ":" + std::to_string(options_.port);
    beast::error_code ec;
    tcp::resolver resolver(io_);
    const auto found = resolver.resolve(options_.host, std::to_string(options_.port),
                                        tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || found.empty()) return io_error("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
    const tcp::endpoint endpoint = found.begin()->endpoint();
    // SO_REUSEADDR only (a port left in TIME_WAIT is taken again); never
    // SO_REUSEPORT, which would let a second server share a port in use.
    if (acceptor_.open(endpoint.protocol(), ec); !ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      const std::string why = ec.message();
      acceptor_.close(ec);
      return io_error("cannot listen on " + where + ": " + why);
    }
    *port = acceptor_.local_endpoint().port();
    return Status();
  }

  void run() {
    accept();
    io_.run();
  }

  void stop() {
    std::call_once(stopped_, [this] {
      io_.stop();
      pool_.stop();
      pool_.join();
    });
  }

 private:
  void accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {
        // Out of files or memory for the moment: try again soon rather than spin.
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](beast::error_code wait_ec) {
          if (!wait_ec) accept();
        });
        return;
      }
      admit(std::move(socket));
      accept();
    });
  }

  void admit(tcp::socket socket) {
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // a streamed token leaves at once
    if (front_.open.load() >= options_.max_connections) return refuse(std::move(socket));
    front_.open.fetch_add(1);
    if (tls_) {
      std::make_shared<TlsConnection>(beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls_),
                                      front_)
          ->start();
    } else {
      std::make_shared<PlainConnection>(beast::tcp_stream(std::move(socket)), front_)->start();
    }
  }

  // One connection too many: a 503 if it can be said in one write (not over TLS), then closed.
  void refuse(tcp::socket socket) {
    beast::error_code ignored;
    if (!tls_) {
      const std::string body =
          error_json(ApiError{.status = 503,
                              .type = "server_error",
                              .message = "the server holds its --max-connections " +
                                         std::to_string(options_.max_connections) + " connections; try again later",
                              .code = "too_many_connections",
                              .param = {}});
      const std::string text =
          "HTTP/1.1 503 Service Unavailable\r\nServer: tensorpc\r\nContent-Type: application/json\r\n"
          "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(text), ignored);
      socket.shutdown(tcp::socket::shutdown_send, ignored);
    }
    front_.routes->count("other", 503);
    socket.close(ignored);
  }

  // The connections use front_ and tls_ until the last of them goes, with io_.
  const HttpOptions& options_;
  FrontContext front_;
  std::optional<asio::ssl::context> tls_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer retry_{io_};
  asio::thread_pool pool_;  // destroyed first, with the requests it never started
  std::once_flag stopped_;
};

HttpServer::HttpServer(HttpOptions options)
    : options_(std::move(options)),
      routes_(options_.model_id, options_.api_key),
      loop_(std::make_unique<Loop>(options_, routes_)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() { return loop_->bind(&port_); }

void HttpServer::listen() { loop_->run(); }

void HttpServer::stop() { loop_->stop(); }

void HttpServer::set_loading(std::string what) { routes_.set_loading(std::move(what)); }
void HttpServer::set_model(ServedModel model) { routes_.set_model(std::move(model)); }
void HttpServer::set_failed(std::string why) { routes_.set_failed(std::move(why)); }

}  // namespace tensorpc::serve
