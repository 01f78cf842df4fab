// Where a tensorpc-server listens and how a connection to it behaves: the
// endpoint, the options of a connection (key, TLS, weights cache, reply
// timeout) and its traffic counters. Used by the client (rpc_client.h) and by
// a server that copies to a peer server.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tensorpc/status.h"
#include "tensorpc/tls.h"

namespace tensorpc {

// Where a server listens. Text form "host:port", or "[v6-address]:port".
struct Endpoint {
  std::string host;  // name or address, without brackets
  uint16_t port = 0;

  // The canonical text form: "127.0.0.1:50052", "[::1]:50052".
  std::string to_string() const;
};

// Parses "host:port" or "[::1]:port". An empty host, a missing or
// non-numeric port, port 0 or an unbracketed IPv6 address is an
// invalid_argument naming the text.
StatusOr<Endpoint> parse_endpoint(std::string_view text);

struct RemoteOptions {
  // Set calls of at least this many bytes go through the server's weights
  // cache: the client sends the SHA-256 of the bytes first and the bytes only
  // when the server does not have them (Buffer::set_tensors asks about 16 MiB
  // of tensors per round trip). Tensors flagged kFlagInput (set again before
  // every compute) never do. UINT64_MAX turns the cache off.
  //
  // 64 KiB: asking costs a 56-byte entry, a hash and an entry (with --cache,
  // a file) in the server's cache, no longer a round trip each, so every
  // weight matrix of a real model goes through the cache, down to the
  // ~330 KiB ones of a small q4_0 model. What stays below are norm vectors
  // (4 bytes × the embedding width, 3–32 KiB), about 0.1% of a model's bytes.
  uint64_t weights_cache_threshold = uint64_t{64} << 10;
  // The servers' pre-shared key (tensorpc/key.h), proven to each server when
  // a connection opens; never sent. Unset: the key in the file named by the
  // environment variable TENSORPC_KEY_FILE, or none when that is unset. An
  // empty string: no key, whatever the environment says.
  std::optional<std::string> key = std::nullopt;
  // TLS (tensorpc/tls.h): on when the CA file is set; the server's
  // certificate must chain to it and name the endpoint's host. Unset: from
  // TENSORPC_TLS_CA, TENSORPC_TLS_CERT and TENSORPC_TLS_KEY, or plain TCP
  // when TENSORPC_TLS_CA is unset. Set with an empty CA file: plain TCP,
  // whatever the environment says.
  std::optional<TlsOptions> tls = std::nullopt;
  // The longest any call waits with no word from its server: for the
  // server to take a request's bytes, and between the parts of its reply.
  // While a server (1.9 or later) works on what the client waits for — a
  // SYNCHRONIZE after long computations — it sends a keep-alive four times
  // a second, so a long computation is never cut off (give at least a
  // second); a server that says
  // nothing for longer (stopped, hung, its link cut without a FIN, killed)
  // fails the call with an I/O error naming the command and the endpoint,
  // and the connection is closed; the next allocation opens a new one.
  // Opening a connection takes at most this long too (10 s when larger, or
  // 0). 0: no limit (a server that dies is still noticed at once, its socket
  // closing; one whose host vanishes, by TCP keepalive within minutes).
  std::chrono::milliseconds reply_timeout{30000};
};

// Traffic of the live connection to an endpoint, for tests and benchmarks.
// Bytes count frame headers too.
struct ConnectionStats {
  bool live = false;            // a connection to the endpoint exists and is not broken
  uint64_t bytes_sent = 0;      // all frames sent since it was opened
  uint64_t bytes_received = 0;  // all frames received
  uint64_t requests = 0;        // frames sent, with or without a reply
  uint64_t round_trips = 0;     // requests that waited for a reply
  uint64_t resent = 0;          // graphs and plans stored again: the server had dropped them
  uint64_t last_round_trip_ns = 0;  // the last request that waited: sent to answered, the server's work included
};

}  // namespace tensorpc
