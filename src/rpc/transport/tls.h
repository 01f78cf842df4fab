// TlsContext: the certificates, key and rules of one side of TLS links
// (an OpenSSL SSL_CTX), made once and shared by every link that side opens or
// accepts. Socket::start_tls runs the handshake on a connected socket with it.
//
// Both sides speak TLS 1.3 only. A server sends no session tickets, so
// nothing arrives on a link that nobody asked for (Connection reads any
// unexpected byte as a server gone wrong). Loading is where bad files show:
// a missing or unreadable file, a key that does not match its certificate or
// a CA file without certificates is an error naming the file.
#pragma once

#include <memory>
#include <string>

#include "tensorpc/status.h"
#include "tensorpc/tls.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX, kept out of this header

namespace tensorpc::rpc {

enum class TlsRole { client, server };

class TlsContext {
 public:
  // A server's: needs cert_file and key_file; with ca_file, clients must
  // present a certificate that chains to it.
  static StatusOr<std::shared_ptr<const TlsContext>> for_server(const TlsOptions& options);
  // A client's: needs ca_file, which the server's certificate must chain to;
  // presents cert_file (with key_file) when set.
  static StatusOr<std::shared_ptr<const TlsContext>> for_client(const TlsOptions& options);

  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  TlsRole role() const { return role_; }
  ssl_ctx_st* native() const { return ctx_; }

 private:
  TlsContext(ssl_ctx_st* ctx, TlsRole role) : ctx_(ctx), role_(role) {}

  ssl_ctx_st* ctx_;
  TlsRole role_;
};

// OpenSSL's queued errors as one line ("error:0A000086:SSL
// routines::certificate verify failed"), and clears the queue; `fallback`
// when it is empty.
std::string take_tls_errors(const std::string& fallback);

}  // namespace tensorpc::rpc
