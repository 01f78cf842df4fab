// HttpConnection: one client connection of `tensorpc serve`'s HTTP front, on
// Boost.Beast. Everything it does runs on its strand, driven by the event
// loop; it costs a buffer and a parser, never a thread while it waits.
//
// Its life, request after request (pipelined ones answered in order, as
// each is read only once the previous answer is written):
//   wait     no request byte yet: closed after the keep-alive timeout;
//   header   the first byte came: the header must be whole within the
//            header timeout and 64 KiB (431); then the route (404, 405),
//            the key (401) and a declared body size (413) are checked
//            before any body byte is read;
//   body     read as it comes, chunked or not, at a minimum average rate
//            (else closed) and up to max_body (413 once passed);
//   answer   the route runs (on the loop if quick, else on a worker) and
//            answers through the Responder: one reply, or a stream of
//            server-sent events written as they come, a comment now and
//            then while nothing is said (a write that fails marks the
//            client gone, which stops its generation).
// A refusal that leaves a body unread closes the connection after the answer,
// reading and dropping what still comes for a moment so the client sees it.
//
// Stream is beast::tcp_stream, beast::ssl_stream<beast::tcp_stream>, or
// beast::test::stream (the fuzz target: no deadlines).
#pragma once

#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "serve/http_routes.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace tensorpc::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// The limits every connection keeps (HttpOptions gives them).
struct HttpLimits {
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds keep_alive_timeout{5'000};
  uint64_t max_body = 4u << 20;
  uint64_t min_body_rate = 16u << 10;  // bytes per second, on average, after header_timeout's allowance
  size_t header_limit = 64u << 10;
  std::chrono::milliseconds write_timeout{30'000};  // one write of an answer
  std::chrono::milliseconds linger{2'000};          // reading what a refused client still sends
  std::chrono::milliseconds ping_every{500};        // an SSE comment while a stream says nothing
};

// What the connections of one front share.
struct FrontContext {
  HttpLimits limits;
  HttpRoutes* routes = nullptr;
  asio::any_io_executor work;  // where routes that are not quick run
  std::atomic<int> open{0};    // connections open (each decrements it when it goes)
};

template <class Stream>
class HttpConnection : public Responder, public std::enable_shared_from_this<HttpConnection<Stream>> {
 public:
  // `front` counts this connection already; it must outlive it.
  HttpConnection(Stream stream, FrontContext& front)
      : front_(front), stream_(std::move(stream)), timer_(stream_.get_executor()), buffer_(kBufferLimit) {}
  ~HttpConnection() override { front_.open.fetch_sub(1); }

  void start() {
    if constexpr (requires { stream_.async_handshake(asio::ssl::stream_base::server, [](beast::error_code) {}); }) {
      expire(front_.limits.header_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server, [self = this->shared_from_this()](beast::error_code ec) {
        if (ec) return self->close();
        self->wait_request();
      });
    } else {
      wait_request();
    }
  }

  // Responder: from any thread, onto the strand.
  void reply(HttpReply reply) override {
    post([reply = std::move(reply)](HttpConnection& c) mutable { c.write_reply(std::move(reply)); });
  }
  void start_events(bool ndjson) override {
    post([ndjson](HttpConnection& c) { c.begin_events(ndjson); });
  }
  void send(std::string events) override {
    post([events = std::move(events)](HttpConnection& c) mutable { c.queue_events(std::move(events), false); });
  }
  void end(std::string events) override {
    post([events = std::move(events)](HttpConnection& c) mutable { c.queue_events(std::move(events), true); });
  }
  std::shared_ptr<std::atomic<bool>> gone() override { return gone_; }

 private:
  // Room for a whole header and what a pipelining client sends after it.
  static constexpr size_t kBufferLimit = 256u << 10;
  using Clock = std::chrono::steady_clock;

  template <class F>
  void post(F f) {
    asio::post(stream_.get_executor(), [self = this->shared_from_this(), f = std::move(f)]() mutable { f(*self); });
  }

  void expire(Clock::duration d) {
    auto& lowest = beast::get_lowest_layer(stream_);
    if constexpr (requires { lowest.expires_after(d); }) lowest.expires_after(d);
  }
  void expire_never() {
    auto& lowest = beast::get_lowest_layer(stream_);
    if constexpr (requires { lowest.expires_never(); }) lowest.expires_never();
  }

  void close() {
    gone_->store(true);
    closed_ = true;
    timer_.cancel();
    beast::close_socket(beast::get_lowest_layer(stream_));
  }

  // The answer was the last: say so to the client, drop what it still sends for a moment, close.
  void finish() {
    closed_ = true;
    gone_->store(true);
    timer_.cancel();
    if constexpr (requires { stream_.async_shutdown([](beast::error_code) {}); }) {
      expire(front_.limits.linger);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      auto& lowest = beast::get_lowest_layer(stream_);
      if constexpr (requires { lowest.socket(); }) {
        beast::error_code ignored;
        lowest.socket().shutdown(asio::socket_base::shutdown_send, ignored);
      }
      expire(front_.limits.linger);
      linger();
    }
  }
  void linger() {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(16384), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->linger();
    });
  }

  void wait_request() {
    parser_.reset();
    events_ = false;
    if (buffer_.size() > 0) return read_header();
    expire(front_.limits.keep_alive_timeout);
    stream_.async_read_some(buffer_.prepare(16384), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(front_.limits.header_limit));
    // The declared size is checked once the route and the key are; no limit
    // here (not boost::none, which Boost 1.74 compares as below any size).
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    expire(front_.limits.header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    label_ = "other";
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return refuse(
          431, "invalid_request_error", "headers_too_large",
          "the request's headers are too large (over " + std::to_string(front_.limits.header_limit >> 10) + " KiB)");
    }
    const bool malformed = ec && ec.category() == http::make_error_code(http::error::bad_version).category() &&
                           ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (malformed) {
      return refuse(400, "invalid_request_error", "malformed_request",
                    "the HTTP request is malformed: " + ec.message());
    }
    if (ec) return close();  // the client left, or its header took too long
    const auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    const std::string_view target = req.target();
    path_ = std::string(target.substr(0, target.find('?')));
    method_ = std::string(req.method_string());
    route_ = front_.routes->find(path_);
    if (!route_) {
      return refuse(404, "not_found_error", "not_found", "no route for " + method_ + " " + path_);
    }
    label_ = route_->label;
    const bool get = req.method() == http::verb::get || head_;
    if (!(get ? route_->get : req.method() == http::verb::post && route_->post)) {
      const std::string allow = route_->get ? "GET, HEAD" : "POST";
      return refuse(405, "invalid_request_error", "method_not_allowed", path_ + " takes " + allow + ", not " + method_,
                    {{"Allow", allow}});
    }
    if (!route_->open && !front_.routes->authorized(req[http::field::authorization], req["x-api-key"])) {
      const bool sent = req.find(http::field::authorization) != req.end();
      return refuse(401, "authentication_error", "invalid_api_key",
                    sent ? "the API key is wrong" : "an API key is needed: Authorization: Bearer KEY",
                    {{"WWW-Authenticate", "Bearer"}});
    }
    if (const auto declared = parser_->content_length(); declared && *declared > front_.limits.max_body) {
      return refuse_body_too_large();
    }
    if (parser_->is_done()) return dispatch();
    parser_->body_limit(front_.limits.max_body);
    body_started_ = Clock::now();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
      expire(front_.limits.write_timeout);
      return http::async_write(stream_, *interim,
                               [self = this->shared_from_this(), interim](beast::error_code ec, size_t) {
                                 if (ec) return self->close();
                                 self->read_body();
                               });
    }
    read_body();
  }

  // The body so far must have come at min_body_rate on average, after header_timeout's allowance.
  void read_body() {
    const uint64_t received = parser_->get().body().size();
    const auto allowed =
        front_.limits.header_timeout +
        std::chrono::milliseconds(received * 1000 / std::max<uint64_t>(front_.limits.min_body_rate, 1));
    const auto left = body_started_ + allowed - Clock::now();
    if (left <= Clock::duration::zero()) return close();
    expire(left);
    http::async_read_some(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::body_limit) return self->refuse_body_too_large();
      if (ec) return self->close();
      if (self->parser_->is_done()) return self->dispatch();
      self->read_body();
    });
  }

  void dispatch() {
    expire_never();  // the answer may take a while to come; writing it has its own deadline
    std::string body = std::move(parser_->get().body());
    if (route_->quick) return front_.routes->handle(*route_, std::move(body), this->shared_from_this());
    asio::post(front_.work, [self = this->shared_from_this(), route = route_, body = std::move(body)]() mutable {
      self->front_.routes->handle(*route, std::move(body), self);
    });
  }

  void refuse(int status, std::string type, std::string code, std::string message,
              std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpReply r = error_reply(ApiError{.status = status,
                                       .type = std::move(type),
                                       .message = std::move(message),
                                       .code = std::move(code),
                                       .param = {}});
    r.headers = std::move(headers);
    // A body left unread (or a header that could not be read) leaves the connection out of step.
    if (!parser_ || !parser_->is_header_done() || !parser_->is_done()) keep_alive_ = false;
    write_reply(std::move(r));
  }
  void refuse_body_too_large() {
    refuse(413, "invalid_request_error", "body_too_large",
           "the request body passes --max-body (" + std::to_string(front_.limits.max_body) + " bytes)");
  }

  void write_reply(HttpReply r) {
    if (closed_) return;
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), version_);
    res->set(http::field::server, "tensorpc");
    res->set(http::field::content_type, r.content_type);
    for (auto& [name, value] : r.headers) res->set(name, value);
    res->keep_alive(keep_alive_);
    if (head_) {
      res->content_length(r.body.size());
    } else {
      res->body() = std::move(r.body);
      res->prepare_payload();
    }
    front_.routes->count(label_, r.status);
    expire(front_.limits.write_timeout);
    http::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->close();
      if (!self->keep_alive_) return self->finish();
      self->wait_request();
    });
  }

  void begin_events(bool ndjson) {
    if (closed_) return;
    events_ = true;
    ndjson_ = ndjson;
    chunked_ = version_ >= 11 && !head_;
    if (!chunked_) keep_alive_ = false;  // the end of the body is the end of the connection
    header_written_ = false;
    event_res_.emplace(http::status::ok, version_);
    event_res_->set(http::field::server, "tensorpc");
    event_res_->set(http::field::content_type, ndjson ? "application/x-ndjson" : "text/event-stream");
    event_res_->set(http::field::cache_control, "no-cache");
    event_res_->set("X-Accel-Buffering", "no");
    event_res_->keep_alive(keep_alive_);
    if (chunked_) event_res_->chunked(true);
    event_sr_.emplace(*event_res_);
    front_.routes->count(label_, 200);
    expire(front_.limits.write_timeout);
    http::async_write_header(stream_, *event_sr_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->header_written_ = true;
      self->pump();
    });
  }

  void queue_events(std::string events, bool last) {
    if (closed_ || !events_) return;
    if (!head_) pending_ += events;
    end_pending_ = end_pending_ || last;
    pump();
  }

  // Writes what is pending, one write at a time; the end once all is out.
  void pump() {
    if (closed_ || writing_ || !header_written_) return;
    if (pending_.empty()) {
      if (end_pending_) return end_events();
      return arm_ping();
    }
    timer_.cancel();
    in_flight_.swap(pending_);
    pending_.clear();
    writing_ = true;
    expire(front_.limits.write_timeout);
    const auto done = [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->close();
      self->pump();
    };
    if (chunked_) {
      asio::async_write(stream_, http::make_chunk(asio::buffer(in_flight_)), done);
    } else {
      asio::async_write(stream_, asio::buffer(in_flight_), done);
    }
  }

  void end_events() {
    events_ = false;
    end_pending_ = false;
    if (!chunked_) return finish();
    writing_ = true;
    expire(front_.limits.write_timeout);
    asio::async_write(stream_, http::make_chunk_last(),
                      [self = this->shared_from_this()](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) return self->close();
                        if (!self->keep_alive_) return self->finish();
                        self->wait_request();
                      });
  }

  // Nothing said for a while: an SSE comment, which clients skip and whose write fails once the client is gone.
  void arm_ping() {
    timer_.expires_after(front_.limits.ping_every);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_ || !self->events_ || self->ndjson_ || self->writing_ || !self->pending_.empty()) return;
      self->pending_ = ": ping\n\n";
      self->pump();
    });
  }

  FrontContext& front_;
  Stream stream_;
  asio::steady_timer timer_;  // the pings of a quiet stream
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  bool closed_ = false;
  bool ndjson_ = false;  // the stream is NDJSON: no SSE comments

  // The request being answered.
  const RouteInfo* route_ = nullptr;
  std::string_view label_ = "other";
  std::string path_, method_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool head_ = false;
  Clock::time_point body_started_;

  // Its answer, when a stream of events.
  bool events_ = false, chunked_ = false, header_written_ = false, writing_ = false, end_pending_ = false;
  std::optional<http::response<http::empty_body>> event_res_;
  std::optional<http::response_serializer<http::empty_body>> event_sr_;
  std::string pending_, in_flight_;
};

}  // namespace tensorpc::serve
