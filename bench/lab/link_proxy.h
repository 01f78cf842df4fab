// LinkProxy: an emulated network link in front of a TCP server, so that
// loopback measurements can show what a LAN would cost (`tensorpc bench
// --link`). It listens on a loopback port and forwards every connection to a
// target; in each direction it holds every chunk of bytes back by a one-way
// delay and paces the bytes to a rate, as a link of that latency and
// bandwidth would. Bytes are never changed, reordered or dropped.
//
// Each accepted connection gets two threads per direction (one reads and
// stamps each chunk with its arrival time, one delivers it then). Reading
// stops while 4 MiB are in flight in a direction, so a fast sender feels the
// link's back-pressure. stop() (and the destructor) closes every connection
// and joins every thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tensorpc/status.h"

namespace tensorpc::tools {

struct LinkShape {
  std::chrono::nanoseconds one_way_delay{0};
  double bits_per_second = 0;  // 0: no cap

  // "1ms,1gbit": the form parse_link reads.
  std::string to_string() const;
};

// "DELAY,RATE": DELAY a number with ns, us, ms or s; RATE a number with bit,
// kbit, mbit or gbit (per second; 1000-based), or "inf" for no cap.
// "0ms,inf" is a plain relay. Anything else is an invalid_argument quoting
// the text.
StatusOr<LinkShape> parse_link(std::string_view text);

class LinkProxy {
 public:
  // Listens on 127.0.0.1 (a port the OS picks) and forwards to
  // target_host:target_port, connecting once per accepted connection.
  static StatusOr<std::unique_ptr<LinkProxy>> start(const std::string& target_host, uint16_t target_port,
                                                    const LinkShape& shape);
  ~LinkProxy();
  LinkProxy(const LinkProxy&) = delete;
  LinkProxy& operator=(const LinkProxy&) = delete;

  uint16_t port() const;
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port()); }
  // Connections accepted so far (each costs a connect across the link).
  uint64_t connections() const;
  // Stops accepting, closes every forwarded connection, joins all threads.
  // Idempotent.
  void stop();

  class Impl;

 private:
  explicit LinkProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorpc::tools
