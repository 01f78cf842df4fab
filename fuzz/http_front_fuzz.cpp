// libFuzzer target: arbitrary bytes into one connection of `tensorpc serve`'s
// HTTP front, as a client sends them: the real HttpConnection (Beast's parser,
// the limits, pipelining, HEAD, chunked bodies, Expect: 100-continue) and the
// real routes behind it (the page, /health, /v1/models, /metrics; the API
// answers 503 while no model is loaded, so JSON bodies are left to
// serve_request_fuzz). The connection runs over an in-memory stream that
// hands over the input in reads of a size the input chooses, then ends.
//
// It must never crash, and what it writes back must be a sequence of whole
// HTTP responses, each with a status line, headers and the body its
// Content-Length or chunked encoding says (HEAD answers carry none).
#include <boost/beast/_experimental/test/stream.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "serve/http_connection.h"
#include "serve/http_routes.h"

namespace {

using namespace tensorpc::serve;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "http_front_fuzz: %s\n", what);
  std::abort();
}

// Every response in `out` parses whole; the last may be cut short only where
// the connection closed mid-write (never here: the stream takes every write).
void check_responses(std::string_view out) {
  while (!out.empty()) {
    if (!out.starts_with("HTTP/1.")) fail("the output is not an HTTP response");
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    beast::error_code ec;
    size_t used = parser.put(asio::buffer(out.data(), out.size()), ec);  // the header alone (not eager)
    if (ec || !parser.is_header_done()) fail("a response's header does not parse");
    // A HEAD answer has a Content-Length and no body: the next response follows at once.
    if (out.substr(used).starts_with("HTTP/1.") || (used == out.size() && !parser.is_done())) {
      out.remove_prefix(used);
      continue;
    }
    parser.eager(true);
    while (!parser.is_done() && used < out.size()) {
      const size_t n = parser.put(asio::buffer(out.data() + used, out.size() - used), ec);
      if (ec) fail("a response's body does not parse");
      if (n == 0) break;
      used += n;
    }
    if (!parser.is_done()) fail("a response ends before its body does");
    out.remove_prefix(used);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte: the size of each read (1..64, or all at once) and whether a key is asked.
  const uint8_t knobs = data[0];
  const size_t read_size = (knobs & 0x3f) == 0 ? size : (knobs & 0x3f);
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  asio::io_context io;
  HttpRoutes routes("fuzz-model", (knobs & 0x40) ? "fuzz-key" : "");
  routes.set_loading("fuzzing");
  FrontContext front;
  front.limits.max_body = 4096;
  front.limits.header_limit = 8192;
  front.routes = &routes;
  front.work = io.get_executor();
  front.open = 1;

  beast::test::stream server(io), client(io);
  server.connect(client);
  server.append(input);
  server.read_size(read_size);
  server.close_remote();  // the client sends nothing more: its end of input ends the connection
  std::make_shared<HttpConnection<beast::test::stream>>(std::move(server), front)->start();
  io.run();
  if (front.open.load() != 0) fail("the connection outlived its I/O");
  if (std::getenv("HTTP_FRONT_FUZZ_PRINT")) std::fwrite(client.str().data(), 1, client.str().size(), stderr);
  check_responses(client.str());
  return 0;
}
