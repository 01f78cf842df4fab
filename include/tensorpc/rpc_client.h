// The client side of tensorpc's RPC layer: devices of a tensorpc-server used
// as if they were local.
//
// connect_devices("host:port") asks a server for its devices and returns one
// Device per server device; remote_device() names one without asking. Those
// Device objects hold only the endpoint and the device index: they connect on
// demand (to read memory, to allocate) and let the connection go afterwards.
// Buffers and streams they create each hold the connection to their server,
// shared by everything on that endpoint, so the socket closes exactly when
// the last buffer and stream on it are destroyed — and the server then frees
// all that connection allocated. A later allocation reconnects.
//
// A server started with a key serves only clients that prove they hold it:
// give it in RemoteOptions::key or name its file in TENSORPC_KEY_FILE. A
// server started with a TLS certificate speaks only TLS: name the CA file
// that certificate chains to in RemoteOptions::tls or TENSORPC_TLS_CA.
//
// Ownership: as for every Device, the caller owns buffers and streams and
// must destroy them before the device they came from. Every call may be made
// from any thread. No failure aborts the process: each is a Status naming the
// command, the endpoint and the reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpc/device.h"
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
  // The longest any call to the server waits for it: for the server to take
  // the bytes of a request, and for each part of a reply to arrive (so a
  // SYNCHRONIZE waits this long for the computations before it). A server
  // that says nothing for longer (stopped, hung, or cut off without a FIN)
  // fails the call with an error naming the endpoint, and the connection is
  // closed; the next allocation opens a new one. Opening a connection takes
  // at most this long too (10 s when larger, or 0). 0: no limit, for runs of
  // unknown length; a server that dies is still noticed at once (its socket
  // closes), and one whose host vanishes by TCP keepalive within minutes.
  std::chrono::milliseconds reply_timeout{0};
};

// One Device per device of the server at `endpoint` (LIST_DEVICES). A server
// that cannot be reached is an error naming the endpoint.
StatusOr<std::vector<std::unique_ptr<Device>>> connect_devices(const std::string& endpoint,
                                                               const RemoteOptions& options = {});

// Device `index` of the server at `endpoint`, without contacting it now.
// Never null; an unreachable server or a missing index shows in its calls
// (see RemoteDevice in src/rpc/remote_device.h for what each returns).
std::unique_ptr<Device> remote_device(const std::string& endpoint, uint32_t index, const RemoteOptions& options = {});

// Traffic of the live connection to an endpoint, for tests and benchmarks.
// Bytes count frame headers too.
struct ConnectionStats {
  bool live = false;            // a connection to the endpoint exists and is not broken
  uint64_t bytes_sent = 0;      // all frames sent since it was opened
  uint64_t bytes_received = 0;  // all frames received
  uint64_t requests = 0;        // frames sent, with or without a reply
  uint64_t round_trips = 0;     // requests that waited for a reply
};
// All zero (live false) when no live connection to `endpoint` exists.
ConnectionStats connection_stats(const std::string& endpoint);

// One PING round trip to `endpoint`, on the shared connection (made for the
// call, with options.key, if none is live), within options.reply_timeout.
// For health checks and latency measurements.
Status ping(const std::string& endpoint, const RemoteOptions& options = {});

}  // namespace tensorpc
