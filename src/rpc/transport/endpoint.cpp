// Endpoint: parsing and printing "host:port" and "[v6-address]:port".
#include <charconv>

#include "tensorpc/endpoint.h"

namespace tensorpc {

std::string Endpoint::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<Endpoint> parse_endpoint(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return invalid_argument("endpoint '" + std::string(text) + "': " + why +
                            " (expected host:port or [v6-address]:port)");
  };
  Endpoint e;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    e.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') return bad("no ':port' after ']'");
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    e.host = std::string(text.substr(0, colon));
    // "::1:50052" could split anywhere; brackets say where the address ends.
    if (e.host.find(':') != std::string::npos) return bad("an IPv6 address must be written in brackets");
    port = text.substr(colon + 1);
  }
  if (e.host.empty()) return bad("empty host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    return bad("port '" + std::string(port) + "' is not a number from 1 to 65535");
  }
  e.port = static_cast<uint16_t>(value);
  return e;
}

}  // namespace tensorpc
