// Socket: an owned TCP socket with whole-message send and receive.
//
// The narrow OS interface of the rpc layer: everything that touches a file
// descriptor is here. Sends gather from several caller buffers in one
// sendmsg (header and payload without copying them together); receives fill
// exactly the bytes asked for, straight into the caller's memory. Every
// failure is a Status naming what failed ("recv: connection reset by peer",
// "connection closed by peer").
//
// Timeouts: a socket may carry an I/O timeout, the longest a send or receive
// waits for progress (any byte moved); a peer that stops sending or reading
// for longer fails the call. It bounds a stalled peer, not a slow one: a
// large transfer that keeps moving never times out.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tensorpc/status.h"

namespace tensorpc::rpc {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept : fd_(other.release()), io_timeout_(other.io_timeout_) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port (numeric or resolvable host), with TCP_NODELAY and
  // keepalive set. Fails within `timeout`.
  static StatusOr<Socket> connect(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Listens on host:port (port 0: the OS picks; see local_port()).
  static StatusOr<Socket> listen(const std::string& host, uint16_t port, int backlog = 64);
  // Waits for a connection; the accepted socket has TCP_NODELAY and keepalive.
  StatusOr<Socket> accept();

  // Sends all bytes of all parts (scatter-gather, retrying partial writes).
  Status send_all(std::span<const iovec> parts);
  Status send_all(const void* data, size_t size);
  // Receives exactly `size` bytes into `data`.
  Status recv_all(void* data, size_t size);
  // Blocks until bytes can be read (or the peer hung up, or shutdown() was
  // called), with no timeout: the wait of a server for a client's next frame.
  Status wait_readable();

  // The longest send_all and recv_all wait for progress; zero: no limit (the
  // default). Not thread-safe: set it from the thread that uses the socket.
  void set_io_timeout(std::chrono::milliseconds timeout) { io_timeout_ = timeout; }
  std::chrono::milliseconds io_timeout() const { return io_timeout_; }

  // Shuts down both directions: wakes a thread blocked in recv/accept on it.
  void shutdown();
  void close();
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  uint16_t local_port() const;
  std::string peer_name() const;  // "127.0.0.1:51234"

 private:
  // Waits up to io_timeout_ for `events` (POLLIN, POLLOUT); a timeout is an
  // error naming `what` and the wait.
  Status wait_for(short events, const char* what) const;

  int fd_ = -1;
  std::chrono::milliseconds io_timeout_{0};
};

// True when host is a loopback address or name ("127.0.0.1", "::1", "localhost").
bool is_loopback_host(const std::string& host);

}  // namespace tensorpc::rpc
