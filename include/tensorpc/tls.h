// TLS: encrypted, authenticated links between machines.
//
// A key (tensorpc/key.h) decides who may use a server but leaves the bytes
// readable on the wire; TLS encrypts them. A server started with a
// certificate and its private key (ServerOptions::tls, `tensorpc-server
// --tls-cert --tls-key`) speaks only TLS 1.3. A client turns TLS on by naming
// the certificates it trusts (RemoteOptions::tls, `--tls-ca`, or the
// environment variables below) and then checks that the server's certificate
// chains to one of them and names the host it connected to (an IP address or
// a DNS name in the certificate's subject alternative names).
//
// Mutual TLS: a server given a CA file too asks every client for a
// certificate that chains to it, and refuses those without one. The servers of
// a cluster copy to each other over TLS as well, each checking the other's
// certificate against its own CA file and presenting its own certificate.
// docs/security.md shows how to make a CA and certificates with the openssl
// command.
#pragma once

#include <optional>
#include <string>

#include "tensorpc/status.h"

namespace tensorpc {

// Files in PEM form.
struct TlsOptions {
  // Certificates the other side's certificate must chain to. A client needs
  // it to use TLS; a server with it asks clients for certificates (mutual
  // TLS) and checks the servers it copies to against it.
  std::string ca_file = {};
  // This side's certificate (followed by any intermediate certificates) and
  // its private key. A server needs both to use TLS; a client presents them
  // when set, to servers that ask.
  std::string cert_file = {};
  std::string key_file = {};

  bool operator==(const TlsOptions&) const = default;
};

// The environment variables that fill in a client's TlsOptions when
// RemoteOptions::tls is unset: TLS is on when kTlsCaVariable names a file.
inline constexpr const char* kTlsCaVariable = "TENSORPC_TLS_CA";
inline constexpr const char* kTlsCertVariable = "TENSORPC_TLS_CERT";
inline constexpr const char* kTlsKeyVariable = "TENSORPC_TLS_KEY";

// A client's TLS settings: `chosen` when set, else the environment's. None
// (std::nullopt) when the CA file of the result is empty: plain TCP. A
// certificate without its key, or the other way round, is an error.
StatusOr<std::optional<TlsOptions>> client_tls(const std::optional<TlsOptions>& chosen);

}  // namespace tensorpc
