// What every session of a server shares: the server's devices, caches,
// registries and options (SessionEnv), and the counters all sessions add to
// (SessionCounters). The server owns them and outlives its sessions; each
// part of a session (session.h) holds a reference to what it reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpc/server/admission.h"
#include "rpc/server/weights_cache.h"
#include "rpc/server/write_grants.h"
#include "rpc/transport/connection.h"
#include "rpc/transport/tls.h"
#include "tensorpc/device.h"
#include "tensorpc/local_weights.h"

namespace tensorpc::rpc {

// Adds the time from its making to its end to `ns` (SessionCounters' times).
class ElapsedInto {
 public:
  explicit ElapsedInto(std::atomic<uint64_t>& ns) : ns_(ns), start_(std::chrono::steady_clock::now()) {}
  ~ElapsedInto() {
    ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  ElapsedInto(const ElapsedInto&) = delete;
  ElapsedInto& operator=(const ElapsedInto&) = delete;

 private:
  std::atomic<uint64_t>& ns_;
  const std::chrono::steady_clock::time_point start_;
};

// Counters every session of a server adds to (ServerStats).
struct SessionCounters {
  std::atomic<uint64_t> live_buffers{0};
  std::atomic<uint64_t> buffer_bytes{0};
  std::atomic<uint64_t> compute_ns{0};    // time spent in graph computations, all sessions
  std::atomic<uint64_t> peer_wait_ns{0};  // time plans spent in WAIT_FOR
  std::atomic<uint64_t> local_weight_hits{0};  // ServerStats's
  std::atomic<uint64_t> local_weight_bytes{0};
  std::atomic<uint64_t> local_weight_mismatches{0};
};

// What a session shares with the server and its other sessions.
struct SessionEnv {
  std::vector<std::shared_ptr<Device>> devices;
  WeightsCache* cache = nullptr;
  const LocalWeights* local_weights = nullptr;  // ServerOptions::local_weights; null: none
  SessionCounters* counters = nullptr;
  uint64_t max_frame = (uint64_t{1} << 30) + 64;  // larger payloads close the connection
  std::string server_name = "tensorpc-server";
  WriteGrants* grants = nullptr;     // write grants of all sessions (server-to-server copies)
  ConnectionCache* peers = nullptr;  // connections this server opened to other servers
  std::string endpoint;              // this server's own host:port, for error messages
  // The pre-shared key clients must prove (auth.h), and this server proves
  // to its peers; empty: none, and every client is served.
  std::string key;
  // Set: every connection starts with a TLS handshake (tls.h), and only
  // then frames. Null: plain TCP.
  std::shared_ptr<const TlsContext> tls;
  // How this server connects to the servers it sends to: its key, and TLS
  // with its own certificate when it serves TLS (set by the server).
  ClientCredentials peer_credentials;
  std::vector<std::string> allowed_peers;      // endpoints (Endpoint::to_string) a send may go to; empty: any
  uint32_t max_plan_wait_ms = 10 * 60 * 1000;  // the longest WAIT_FOR a plan may store (≤ kMaxPlanWaitMs)
  // Limits of one session (ServerOptions); 0: none.
  uint64_t max_session_memory = 0;   // bytes in buffers across all devices
  uint64_t max_session_buffers = 0;  // live buffer handles
  size_t stored_graphs = 64;         // graphs, and plans, kept to run again by id (StoredWork)
  // The longest a started frame, a reply or a call to another server waits
  // for progress (Socket::set_io_timeout); 0: no limit.
  std::chrono::milliseconds io_timeout{0};
  // The TLS handshake, HELLO and AUTH together must be over this long after
  // the accept, however slowly their bytes come; 0: no limit.
  std::chrono::milliseconds handshake_timeout{0};
  Admission* admission = nullptr;  // the cap on admitted clients (set by the server)
};

}  // namespace tensorpc::rpc
