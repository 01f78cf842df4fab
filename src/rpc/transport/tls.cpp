// TLS contexts (tls.h) and a client's TLS settings (tensorpc/tls.h).
#include "rpc/transport/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdlib>
#include <fstream>

namespace tensorpc {

StatusOr<std::optional<TlsOptions>> client_tls(const std::optional<TlsOptions>& chosen) {
  TlsOptions options;
  if (chosen) {
    options = *chosen;
  } else {
    const auto env = [](const char* name) {
      const char* value = std::getenv(name);
      return value == nullptr ? std::string() : std::string(value);
    };
    options = {.ca_file = env(kTlsCaVariable), .cert_file = env(kTlsCertVariable), .key_file = env(kTlsKeyVariable)};
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return invalid_argument(options.cert_file.empty()
                                ? "a TLS private key (" + options.key_file + ") without its certificate"
                                : "a TLS certificate (" + options.cert_file + ") without its private key");
  }
  if (options.ca_file.empty()) {
    if (!options.cert_file.empty()) {
      return invalid_argument("a TLS certificate without a CA file: a client uses TLS only when it names the "
                              "certificates it trusts (--tls-ca, " +
                              std::string(kTlsCaVariable) + ")");
    }
    return std::optional<TlsOptions>();
  }
  return std::optional<TlsOptions>(std::move(options));
}

}  // namespace tensorpc

namespace tensorpc::rpc {
namespace {

struct CtxDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using CtxPtr = std::unique_ptr<SSL_CTX, CtxDeleter>;

// A file the user named that cannot be opened is named plainly, before
// OpenSSL's less helpful "no such file" deep in its error queue.
Status check_readable(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) return io_error(std::string("cannot read the TLS ") + what + " file " + path);
  return Status();
}

StatusOr<CtxPtr> new_context(const SSL_METHOD* method) {
  CtxPtr ctx(SSL_CTX_new(method));
  if (!ctx) return internal_error(take_tls_errors("SSL_CTX_new failed"));
  if (SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION) != 1) {
    return internal_error(take_tls_errors("cannot require TLS 1.3"));
  }
  // Writes return after each record, so a send can wait for the socket with
  // its own timeout; the buffer may move between retries of one write.
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // A peer that closes without close_notify has simply gone, as on plain TCP
  // (frames carry their own lengths, so nothing can be cut short unseen).
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  // Records are read in large gulps rather than header, then body: half the
  // system calls on a bulk transfer (Socket::tls_buffered sees what is held).
  SSL_CTX_set_read_ahead(ctx.get(), 1);
  SSL_CTX_set_default_read_buffer_len(ctx.get(), 64 * 1024);
  return ctx;
}

Status load_own_certificate(SSL_CTX* ctx, const TlsOptions& options) {
  TENSORPC_RETURN_IF_ERROR(check_readable(options.cert_file, "certificate"));
  TENSORPC_RETURN_IF_ERROR(check_readable(options.key_file, "private key"));
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    return invalid_argument(take_tls_errors("failed") + " (TLS certificate file " + options.cert_file + ")");
  }
  const auto mismatch = [&] {
    return invalid_argument("the TLS private key " + options.key_file + " does not belong to the certificate " +
                            options.cert_file + ": " + take_tls_errors("mismatch"));
  };
  if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) return mismatch();
    return invalid_argument(take_tls_errors("failed") + " (TLS private key file " + options.key_file + ")");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return mismatch();
  return Status();
}

Status load_ca(SSL_CTX* ctx, const std::string& ca_file) {
  TENSORPC_RETURN_IF_ERROR(check_readable(ca_file, "CA"));
  if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) != 1) {
    return invalid_argument(take_tls_errors("no certificates") + " (TLS CA file " + ca_file + ")");
  }
  return Status();
}

}  // namespace

StatusOr<std::shared_ptr<const TlsContext>> TlsContext::for_server(const TlsOptions& options) {
  if (options.cert_file.empty() || options.key_file.empty()) {
    return invalid_argument("a TLS server needs a certificate file and its private key file");
  }
  TENSORPC_ASSIGN_OR_RETURN(auto ctx, new_context(TLS_server_method()));
  SSL_CTX* c = ctx.get();
  TENSORPC_RETURN_IF_ERROR(load_own_certificate(c, options));
  if (!options.ca_file.empty()) {
    TENSORPC_RETURN_IF_ERROR(load_ca(c, options.ca_file));
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  SSL_CTX_set_num_tickets(c, 0);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  return std::shared_ptr<const TlsContext>(new TlsContext(ctx.release(), TlsRole::server));
}

StatusOr<std::shared_ptr<const TlsContext>> TlsContext::for_client(const TlsOptions& options) {
  if (options.ca_file.empty()) {
    return invalid_argument("a TLS client needs a CA file: the certificates the server's must chain to");
  }
  TENSORPC_ASSIGN_OR_RETURN(auto ctx, new_context(TLS_client_method()));
  SSL_CTX* c = ctx.get();
  TENSORPC_RETURN_IF_ERROR(load_ca(c, options.ca_file));
  if (!options.cert_file.empty()) TENSORPC_RETURN_IF_ERROR(load_own_certificate(c, options));
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
  return std::shared_ptr<const TlsContext>(new TlsContext(ctx.release(), TlsRole::client));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::string take_tls_errors(const std::string& fallback) {
  std::string out;
  bool client_refused = false;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
    const int reason = ERR_GET_REASON(e);
    client_refused |= reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED || reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
                      reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE;
  }
  // In TLS 1.3 a server checks the client's certificate after the client's
  // handshake is over, so its refusal arrives with the first reply.
  if (client_refused) {
    out += " (the server wants a client certificate signed by its CA: --tls-cert and --tls-key, or " +
           std::string(kTlsCertVariable) + " and " + kTlsKeyVariable + ")";
  }
  return out.empty() ? fallback : out;
}

}  // namespace tensorpc::rpc
