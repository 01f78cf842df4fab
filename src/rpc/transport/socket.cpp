// Socket: POSIX TCP sockets behind the narrow interface of socket.h.
//
// Every system call that can be interrupted is retried on EINTR; sends use
// MSG_NOSIGNAL so a peer that went away is an error, never a SIGPIPE; every
// failure names the operation and the OS reason.
#include "rpc/transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

namespace tensorpc::rpc {
namespace {

Status os_error(const std::string& what, int err) { return io_error(what + ": " + std::strerror(err)); }

// Keepalive probes find a peer that vanished without a FIN (power loss, a
// cable pulled) within about a minute and a half instead of hours.
void set_stream_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  const int idle = 60, interval = 10, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

StatusOr<AddrInfoPtr> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    const std::string reason = rc == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(rc);
    return io_error("resolve " + host + ": " + reason);
  }
  return AddrInfoPtr(found);
}

std::string endpoint_of(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Connects fd to addr within `timeout`; fd ends up blocking again.
Status connect_with_timeout(int fd, const addrinfo& addr, std::chrono::milliseconds timeout) {
  const int fl = ::fcntl(fd, F_GETFL, 0);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return os_error("fcntl", errno);
  int rc = ::connect(fd, addr.ai_addr, addr.ai_addrlen);
  if (rc < 0 && errno != EINPROGRESS && errno != EINTR) return os_error("connect", errno);
  if (rc < 0) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return io_error("connect: timed out after " + std::to_string(timeout.count()) + " ms");
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return os_error("connect: poll", errno);
      if (rc > 0) break;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return os_error("connect: getsockopt", errno);
    if (err != 0) return os_error("connect", err);
  }
  if (::fcntl(fd, F_SETFL, fl) < 0) return os_error("fcntl", errno);
  return Status();
}

std::string format_address(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else {
    return "?";
  }
  return endpoint_of(host, port);
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    io_timeout_ = other.io_timeout_;
    deadline_ = other.deadline_;
    deadline_what_ = std::move(other.deadline_what_);
    tls_ = std::move(other.tls_);
    ahead_ = std::move(other.ahead_);
    ahead_begin_ = std::exchange(other.ahead_begin_, 0);
    ahead_end_ = std::exchange(other.ahead_end_, 0);
  }
  return *this;
}

StatusOr<Socket> Socket::connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  TENSORPC_ASSIGN_OR_RETURN(auto addrs, resolve(host, port, false));
  Status last = io_error("connect " + endpoint_of(host, port) + ": no address");
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.is_open()) {
      last = os_error("socket", errno);
      continue;
    }
    Status st = connect_with_timeout(s.fd(), *a, timeout);
    if (!st.ok()) {
      last = st.with_context(endpoint_of(host, port));
      continue;
    }
    set_stream_options(s.fd());
    return s;
  }
  return last;
}

StatusOr<Socket> Socket::listen(const std::string& host, uint16_t port, int backlog) {
  TENSORPC_ASSIGN_OR_RETURN(auto addrs, resolve(host, port, true));
  Status last = io_error("listen " + endpoint_of(host, port) + ": no address");
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.is_open()) {
      last = os_error("socket", errno);
      continue;
    }
    // A restarted server can bind again while old connections sit in TIME_WAIT.
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) < 0) {
      last = os_error("bind " + endpoint_of(host, port), errno);
      continue;
    }
    if (::listen(s.fd(), backlog) < 0) {
      last = os_error("listen " + endpoint_of(host, port), errno);
      continue;
    }
    return s;
  }
  return last;
}

StatusOr<Socket> Socket::accept() {
  for (;;) {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      set_stream_options(fd);
      return Socket(fd);
    }
    // A connection that died while queued is not the listener's failure.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno == EINVAL) return io_error("accept: socket shut down");
    return os_error("accept", errno);
  }
}

Status Socket::send_all(std::span<const iovec> parts) {
  if (tls_) return tls_send(parts);
  // A local copy of the vector: partial writes advance it in place.
  std::vector<iovec> iov;
  iov.reserve(parts.size());
  for (const iovec& p : parts)
    if (p.iov_len > 0) iov.push_back(p);
  // With a timeout each call is non-blocking, and a full send buffer is
  // waited on by poll, which can give up.
  const bool timed = this->timed();
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL | (timed ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (timed && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        TENSORPC_RETURN_IF_ERROR(wait_for(POLLOUT, "send"));
        continue;
      }
      return os_error("send", errno);
    }
    auto sent = static_cast<size_t>(n);
    while (first < iov.size() && sent >= iov[first].iov_len) {
      sent -= iov[first].iov_len;
      ++first;
    }
    if (sent > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + sent;
      iov[first].iov_len -= sent;
    }
  }
  return Status();
}

Status Socket::send_all(const void* data, size_t size) {
  const iovec part{const_cast<void*>(data), size};
  return send_all(std::span<const iovec>(&part, 1));
}

Status Socket::recv_all(void* data, size_t size) {
  if (tls_) return tls_recv(data, size);
  auto* p = static_cast<uint8_t*>(data);
  const size_t have = std::min(size, ahead_end_ - ahead_begin_);
  if (have > 0) {
    std::memcpy(p, ahead_.get() + ahead_begin_, have);
    ahead_begin_ += have;
    p += have;
    size -= have;
  }
  // Here the read-ahead is empty, or size is 0.
  const bool timed = this->timed();
  while (size > 0) {
    const bool small = size < kReadAhead;
    if (small && !ahead_) ahead_ = std::make_unique<uint8_t[]>(kReadAhead);
    const ssize_t n = ::recv(fd_, small ? ahead_.get() : p, small ? kReadAhead : size, timed ? MSG_DONTWAIT : 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (timed && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        TENSORPC_RETURN_IF_ERROR(wait_for(POLLIN, "recv"));
        continue;
      }
      return os_error("recv", errno);
    }
    if (n == 0) return io_error("connection closed by peer");
    size_t moved = static_cast<size_t>(n);
    if (small) {
      ahead_end_ = moved;
      moved = std::min(moved, size);
      std::memcpy(p, ahead_.get(), moved);
      ahead_begin_ = moved;
    }
    p += moved;
    size -= moved;
  }
  return Status();
}

Status Socket::wait_readable() {
  if (buffered()) return Status();  // poll would not see them
  if (deadline_) return wait_for(POLLIN, "wait for the next frame");
  return wait_unbounded(POLLIN, "wait for the next frame");
}

bool Socket::readable_now() const {
  if (buffered()) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status Socket::wait_for(short events, const char* what) const {
  using Clock = std::chrono::steady_clock;
  // The sooner of the progress timeout and the deadline.
  const bool progress_first =
      io_timeout_.count() > 0 && (!deadline_ || Clock::now() + io_timeout_ <= *deadline_);
  const Clock::time_point deadline = progress_first ? Clock::now() + io_timeout_ : *deadline_;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      if (!progress_first) return io_error(std::string(what) + ": " + deadline_what_);
      return io_error(std::string(what) + ": timed out: no progress for " + std::to_string(io_timeout_.count()) +
                      " ms");
    }
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (rc > 0) return Status();  // ready, hung up or failed: the next call says which
    if (rc < 0 && errno != EINTR) return os_error(std::string(what) + ": poll", errno);
  }
}

Status Socket::wait_io(short events, const char* what) const {
  return timed() ? wait_for(events, what) : wait_unbounded(events, what);
}

Status Socket::wait_unbounded(short events, const char* what) const {
  for (;;) {
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, -1);
    if (rc > 0) return Status();  // ready, hung up or failed: the next call says which
    if (rc < 0 && errno != EINTR) return os_error(std::string(what) + ": poll", errno);
  }
}

// On Linux shutdown() of a listening socket makes a blocked accept() return
// EINVAL, and of a connected one makes a blocked recv() return 0; the fd
// stays valid until close(), so no other thread can see it reused.
void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void Socket::close() {
  end_tls();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::close_after_draining(std::chrono::milliseconds linger) {
  tls_.reset();  // nothing more is sent, so no close_notify either
  if (fd_ < 0) return;
  ::shutdown(fd_, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + linger;
  char scratch[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    const ssize_t n = ::recv(fd_, scratch, sizeof scratch, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) break;
  }
  close();
}

uint16_t Socket::local_port() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) < 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string Socket::peer_name() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) < 0) return "?";
  return format_address(ss);
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, host.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return false;
}

}  // namespace tensorpc::rpc
