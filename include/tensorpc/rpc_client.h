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
#include "tensorpc/endpoint.h"
#include "tensorpc/status.h"

namespace tensorpc {

// One Device per device of the server at `endpoint` (LIST_DEVICES). A server
// that cannot be reached is an error naming the endpoint.
StatusOr<std::vector<std::unique_ptr<Device>>> connect_devices(const std::string& endpoint,
                                                               const RemoteOptions& options = {});

// Device `index` of the server at `endpoint`, without contacting it now.
// Never null; an unreachable server or a missing index shows in its calls
// (see RemoteDevice in src/rpc/client/remote_device.h for what each returns).
std::unique_ptr<Device> remote_device(const std::string& endpoint, uint32_t index, const RemoteOptions& options = {});

// All zero (live false) when no live connection to `endpoint` exists.
ConnectionStats connection_stats(const std::string& endpoint);

// One PING round trip to `endpoint`, on the shared connection (made for the
// call, with options.key, if none is live), within options.reply_timeout.
// For health checks and latency measurements.
Status ping(const std::string& endpoint, const RemoteOptions& options = {});

// Whether the session this process holds with `endpoint` — what its buffers
// and plans live in — is still there: one PING on the live connection,
// within options.reply_timeout, never opening a new one. Fails (io_error
// naming the endpoint) when there is none, it broke, its server hung up
// (killed, or restarted: a new process holds none of the old buffers) or
// the PING has no reply in time (a frozen server; the connection is closed).
Status check_session(const std::string& endpoint, const RemoteOptions& options = {});

}  // namespace tensorpc
