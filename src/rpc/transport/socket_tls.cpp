// Socket's TLS side (socket.h): the handshake, and sends and receives through
// an OpenSSL session.
//
// The session reads and writes the descriptor through a BIO of our own, so
// that every write uses send() with MSG_NOSIGNAL: a peer that went away is an
// error, never a SIGPIPE that would end a process which did not ignore it.
// The descriptor is non-blocking; when OpenSSL wants the socket readable or
// writable, the call waits for it under the socket's I/O timeout.
#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>

#include "rpc/transport/socket.h"
#include "rpc/transport/tls.h"

namespace tensorpc::rpc {
namespace {

// Parts of a send up to this size are gathered and go as one record.
constexpr size_t kStageBytes = 16 * 1024;

int fd_of(BIO* bio) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio))); }

int bio_write(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::send(fd_of(bio), data, static_cast<size_t>(size), MSG_NOSIGNAL);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_write(bio);
    return -1;
  }
}

int bio_read(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  for (;;) {
    const ssize_t n = ::recv(fd_of(bio), data, static_cast<size_t>(size), 0);
    if (n >= 0) return static_cast<int>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) BIO_set_retry_read(bio);
    return -1;
  }
}

long bio_ctrl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

const BIO_METHOD* socket_bio_method() {
  struct Deleter {
    void operator()(BIO_METHOD* m) const { BIO_meth_free(m); }
  };
  static const std::unique_ptr<BIO_METHOD, Deleter> method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tensorpc socket");
    if (m != nullptr) {
      BIO_meth_set_write(m, bio_write);
      BIO_meth_set_read(m, bio_read);
      BIO_meth_set_ctrl(m, bio_ctrl);
    }
    return std::unique_ptr<BIO_METHOD, Deleter>(m);
  }();
  return method.get();
}

bool is_ip_address(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

// Why a client refused the server's certificate, when that is why its
// handshake failed.
std::string verify_failure(SSL* ssl) {
  const long result = SSL_get_verify_result(ssl);
  if (result == X509_V_OK) return {};
  return std::string("the server's certificate was refused: ") + X509_verify_cert_error_string(result);
}

}  // namespace

void Socket::SslDeleter::operator()(ssl_st* ssl) const { SSL_free(ssl); }

Status Socket::start_tls(const TlsContext& ctx, const std::string& peer_host, std::chrono::milliseconds timeout) {
  if (tls_) return internal_error("start_tls: TLS is already on");
  if (read_ahead_held()) return internal_error("start_tls: plain bytes were received ahead of the handshake");
  const int fl = ::fcntl(fd_, F_GETFL, 0);
  if (fl < 0 || ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK) < 0) return io_error(std::string("fcntl: ") + strerror(errno));
  ERR_clear_error();
  std::unique_ptr<ssl_st, SslDeleter> ssl(SSL_new(ctx.native()));
  BIO* bio = socket_bio_method() == nullptr ? nullptr : BIO_new(socket_bio_method());
  if (!ssl || bio == nullptr) {
    if (bio != nullptr) BIO_free(bio);
    return internal_error(take_tls_errors("cannot make a TLS session"));
  }
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd_)));
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl.get(), bio, bio);  // the session owns the BIO now
  if (ctx.role() == TlsRole::client) {
    bool named = false;
    if (is_ip_address(peer_host)) {
      named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), peer_host.c_str()) == 1;
    } else {
      named = SSL_set_tlsext_host_name(ssl.get(), peer_host.c_str()) == 1 && SSL_set1_host(ssl.get(), peer_host.c_str()) == 1;
    }
    if (!named) return invalid_argument(take_tls_errors("bad host") + " (TLS peer name \"" + peer_host + "\")");
    SSL_set_connect_state(ssl.get());
  } else {
    SSL_set_accept_state(ssl.get());
  }
  tls_ = std::move(ssl);
  const auto saved = io_timeout_;
  io_timeout_ = timeout;
  Status result;
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_do_handshake(tls_.get());
    if (rc == 1) break;
    result = tls_wait(rc, "TLS handshake");
    if (!result.ok()) break;
  }
  io_timeout_ = saved;
  if (!result.ok()) {
    std::string why = ctx.role() == TlsRole::client ? verify_failure(tls_.get()) : std::string();
    tls_.reset();  // a failed session sends nothing more
    return why.empty() ? result : Status(result.code(), "TLS handshake: " + why);
  }
  return Status();
}

Status Socket::tls_wait(int result, const char* what) {
  const int error = SSL_get_error(tls_.get(), result);
  switch (error) {
    case SSL_ERROR_WANT_READ:
      return wait_io(POLLIN, what);
    case SSL_ERROR_WANT_WRITE:
      return wait_io(POLLOUT, what);
    case SSL_ERROR_ZERO_RETURN:
      return io_error("connection closed by peer");
    case SSL_ERROR_SYSCALL: {
      const int err = errno;
      std::string queued = take_tls_errors("");
      if (!queued.empty()) return io_error(std::string(what) + ": " + queued);
      if (err == 0) return io_error("connection closed by peer");
      return io_error(std::string(what) + ": " + std::strerror(err));
    }
    default:
      return io_error(std::string(what) + ": " + take_tls_errors("TLS error " + std::to_string(error)));
  }
}

Status Socket::tls_move(size_t size, const char* what, const std::function<int(size_t, size_t, size_t*)>& step) {
  for (size_t done = 0; done < size;) {
    ERR_clear_error();
    errno = 0;
    size_t n = 0;
    const int rc = step(done, std::min<size_t>(size - done, INT_MAX), &n);
    if (rc == 1) {
      done += n;
      continue;
    }
    TENSORPC_RETURN_IF_ERROR(tls_wait(rc, what));
  }
  return Status();
}

Status Socket::tls_recv(void* data, size_t size) {
  auto* p = static_cast<uint8_t*>(data);
  return tls_move(size, "recv", [&](size_t done, size_t n, size_t* moved) {
    return SSL_read_ex(tls_.get(), p + done, n, moved);
  });
}

Status Socket::tls_write(const uint8_t* data, size_t size) {
  return tls_move(size, "send", [&](size_t done, size_t n, size_t* moved) {
    return SSL_write_ex(tls_.get(), data + done, n, moved);
  });
}

// Small parts (a frame header and its fields) are gathered so they go in one
// record; a large part goes straight from the caller's memory.
Status Socket::tls_send(std::span<const iovec> parts) {
  tls_stage_.clear();
  for (const iovec& part : parts) {
    const auto* bytes = static_cast<const uint8_t*>(part.iov_base);
    if (tls_stage_.size() + part.iov_len <= kStageBytes) {
      tls_stage_.insert(tls_stage_.end(), bytes, bytes + part.iov_len);
      continue;
    }
    TENSORPC_RETURN_IF_ERROR(tls_write(tls_stage_.data(), tls_stage_.size()));
    tls_stage_.clear();
    if (part.iov_len < kStageBytes) {
      tls_stage_.insert(tls_stage_.end(), bytes, bytes + part.iov_len);
    } else {
      TENSORPC_RETURN_IF_ERROR(tls_write(bytes, part.iov_len));
    }
  }
  return tls_write(tls_stage_.data(), tls_stage_.size());
}

// SSL_has_pending: decrypted bytes, or received bytes not yet decrypted
// (read ahead), either of which poll() cannot see.
bool Socket::tls_buffered() const { return tls_ && SSL_has_pending(tls_.get()) == 1; }

void Socket::end_tls() {
  if (!tls_) return;
  ERR_clear_error();
  SSL_shutdown(tls_.get());  // non-blocking: a close_notify the socket takes now, or none
  ERR_clear_error();
  tls_.reset();
}

}  // namespace tensorpc::rpc
