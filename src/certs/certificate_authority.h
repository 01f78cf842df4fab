// A cluster's own certificate authority and the certificates it signs, for
// TLS between tensorpc servers and clients (tensorpc/tls.h), without an
// outside CA or the openssl command. `tensorpc certs` is its command line;
// the bench and the tests make their certificates with it too.
//
// A directory holds the CA (ca.pem, ca.key) and any number of certificates,
// NAME.pem with NAME.key, each for a list of IP addresses and DNS names (its
// subject alternative names, which clients check against the host they
// connect to). Keys are ECDSA P-256, written readable by their owner only.
// Certificates are good for both ends of a link (server and client), so one
// file serves a server that also sends to its peers under mutual TLS.
#pragma once

#include <string>
#include <vector>

#include "tensorpc/status.h"
#include "tensorpc/tls.h"

namespace tensorpc {

// Makes `dir` (and its parents) and a CA in it, unless ca.pem is already
// there; `name` is its subject's common name. Returns the CA file.
StatusOr<std::string> ensure_ca(const std::string& dir, const std::string& name = "tensorpc cluster CA");

// Issues `dir`/`stem`.pem and .key, signed by the CA in `dir`, for `hosts`
// (each an IP address or a DNS name; at least one), valid for `days`.
// Returns the CA, certificate and key files as TlsOptions. An existing
// certificate of that stem is replaced.
StatusOr<TlsOptions> issue_certificate(const std::string& dir, const std::string& stem,
                                       const std::vector<std::string>& hosts, int days = 825);

}  // namespace tensorpc
