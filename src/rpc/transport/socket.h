// Socket: an owned TCP socket with whole-message send and receive.
//
// The narrow OS interface of the rpc layer: everything that touches a file
// descriptor is here. Sends gather from several caller buffers in one
// sendmsg (header and payload without copying them together); receives fill
// exactly the bytes asked for. A large receive goes straight into the
// caller's memory; a small one asks the kernel for up to kReadAhead bytes and
// keeps what it did not need for the next receive, so the frames a peer sent
// together (a step's inputs and its run, two replies) cost one system call
// instead of two or three each. Every
// failure is a Status naming what failed ("recv: connection reset by peer",
// "connection closed by peer").
//
// Timeouts: a socket may carry an I/O timeout, the longest a send or receive
// waits for progress (any byte moved); a peer that stops sending or reading
// for longer fails the call. It bounds a stalled peer, not a slow one: a
// large transfer that keeps moving never times out.
//
// TLS: after start_tls() the same calls carry their bytes through a TLS
// session (tls.h) instead of straight through the socket; callers do not
// change. The socket is then non-blocking underneath, and every wait for it
// keeps the same timeout rules.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorpc/status.h"

struct ssl_st;  // OpenSSL's SSL, kept out of this header

namespace tensorpc::rpc {

class TlsContext;

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        io_timeout_(other.io_timeout_),
        tls_(std::move(other.tls_)),
        ahead_(std::move(other.ahead_)),
        ahead_begin_(std::exchange(other.ahead_begin_, 0)),
        ahead_end_(std::exchange(other.ahead_end_, 0)) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  // Connects to host:port (numeric or resolvable host), with TCP_NODELAY and
  // keepalive set. Fails within `timeout`.
  static StatusOr<Socket> connect(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Listens on host:port (port 0: the OS picks; see local_port()).
  // The backlog is the system's largest (SOMAXCONN): a burst of connections
  // waits in the kernel's queue, not for its retry.
  static StatusOr<Socket> listen(const std::string& host, uint16_t port, int backlog = SOMAXCONN);
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
  // Whether bytes can be read at once (or the peer hung up): never waits.
  bool readable_now() const;
  // Whether bytes already received wait to be read (read ahead, or held by
  // the TLS session): a poll of the descriptor does not see them.
  bool buffered() const { return read_ahead_held() || tls_buffered(); }

  // The longest send_all and recv_all wait for progress; zero: no limit (the
  // default). Not thread-safe: set it from the thread that uses the socket.
  void set_io_timeout(std::chrono::milliseconds timeout) { io_timeout_ = timeout; }
  // A time by which every wait must be over, whatever progress is made (a
  // handshake's deadline); past it a wait fails with `what`. Cleared by
  // clear_deadline(). Same thread rules as set_io_timeout.
  void set_deadline(std::chrono::steady_clock::time_point at, std::string what) {
    deadline_ = at;
    deadline_what_ = std::move(what);
  }
  void clear_deadline() { deadline_.reset(); }
  std::chrono::milliseconds io_timeout() const { return io_timeout_; }

  // Runs the TLS handshake on this connected socket in the role of `ctx`,
  // within `timeout` (0: no limit); from then on every send and receive is
  // encrypted. A client checks that the server's certificate chains to its
  // CA file and carries `peer_host` (the name or address it connected to);
  // a refusal is an error saying why ("certificate verify failed: ...").
  Status start_tls(const TlsContext& ctx, const std::string& peer_host, std::chrono::milliseconds timeout);

  // Shuts down both directions: wakes a thread blocked in recv/accept on it.
  void shutdown();
  // Ends a TLS session with a close_notify if it can without waiting, then
  // closes the descriptor.
  void close();
  // Stops sending, then reads and drops what the peer still sends for up to
  // `linger` (or until it closes), then closes: the peer reads what was sent
  // last (a TLS alert saying why) instead of losing it to a reset, which
  // closing with its bytes unread would cause.
  void close_after_draining(std::chrono::milliseconds linger);

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  uint16_t local_port() const;
  std::string peer_name() const;  // "127.0.0.1:51234"

 private:
  // Waits up to io_timeout_ for `events` (POLLIN, POLLOUT); a timeout is an
  // error naming `what` and the wait.
  Status wait_for(short events, const char* what) const;
  // As wait_for, or without a limit when the socket has no timeout.
  Status wait_io(short events, const char* what) const;
  Status wait_unbounded(short events, const char* what) const;
  // Whether sends and receives wait through poll (a timeout or a deadline).
  bool timed() const { return io_timeout_.count() > 0 || deadline_.has_value(); }

  // The TLS side of send_all, recv_all and start_tls (socket_tls.cpp).
  Status tls_send(std::span<const iovec> parts);
  Status tls_write(const uint8_t* data, size_t size);
  Status tls_recv(void* data, size_t size);
  // Calls `step(done, n, &moved)` (an SSL_read_ex or SSL_write_ex of n bytes
  // from offset `done`) until `size` bytes have moved, waiting in between.
  Status tls_move(size_t size, const char* what, const std::function<int(size_t, size_t, size_t*)>& step);
  // Waits as OpenSSL asks after an SSL call returned `result`; any other
  // outcome is an error naming `what`.
  Status tls_wait(int result, const char* what);
  // True when the TLS session holds received bytes not yet read.
  bool tls_buffered() const;
  // True when the read-ahead holds bytes not yet read.
  bool read_ahead_held() const { return ahead_begin_ < ahead_end_; }
  // Sends close_notify when the socket takes it at once, and frees the session.
  void end_tls();

  struct SslDeleter {
    void operator()(ssl_st* ssl) const;
  };

  int fd_ = -1;
  std::chrono::milliseconds io_timeout_{0};
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::string deadline_what_;
  std::unique_ptr<ssl_st, SslDeleter> tls_;
  std::vector<uint8_t> tls_stage_;  // small parts of one send, gathered into one record
  // Plain sockets: bytes received ahead of the reader, [ahead_begin_, ahead_end_) of ahead_
  // (allocated at the first small receive).
  static constexpr size_t kReadAhead = 16 << 10;
  std::unique_ptr<uint8_t[]> ahead_;
  size_t ahead_begin_ = 0;
  size_t ahead_end_ = 0;
};

// True when host is a loopback address or name ("127.0.0.1", "::1", "localhost").
bool is_loopback_host(const std::string& host);

}  // namespace tensorpc::rpc
