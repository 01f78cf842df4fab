// Server: serves a process's devices to tensorpc clients over TCP.
//
// Each accepted connection gets a session (its own thread) that owns every
// buffer it allocates; when the connection ends — cleanly or not — the
// session frees all of it. Devices are shared between sessions. Every field
// of every request is validated before use; bad input gets an error reply or
// a closed connection, never a crash. With a key (ServerOptions::key) only
// clients that prove they hold it are served. See docs/protocol.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/local_weights.h"
#include "tensorpc/status.h"
#include "tensorpc/tls.h"

namespace tensorpc {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 50052;                            // 0: the OS picks one (see Server::port)
  std::vector<std::shared_ptr<Device>> devices;     // empty: one CPU device with every core
  int threads = 0;                                  // threads of that default CPU device (0: all)
  std::string cache_dir;                            // weights cache on disk; empty: memory only
  uint64_t cache_memory_limit = uint64_t{4} << 30;  // bytes the in-memory weights cache may hold
  // The pre-shared key (tensorpc/key.h; read_key_file reads one): when set,
  // a client is served only after proving it holds this key, and this server
  // proves it to the servers it copies to. Empty: no key, every client is
  // served. At most kMaxKeyBytes.
  std::string key;
  // TLS (tensorpc/tls.h): with cert_file and key_file every connection is
  // TLS 1.3 and nothing else is served; with ca_file too, clients must
  // present a certificate that chains to it. The servers this one copies to
  // are reached over TLS as well, checked against ca_file. All empty: plain
  // TCP.
  TlsOptions tls;

  // Limits of one session (one client connection), so that no client can take
  // the whole server. An allocation past either is refused with an error
  // naming the limit; the connection stays usable.
  uint64_t max_session_memory = 0;       // bytes in buffers across all devices; 0: none
  uint64_t max_session_buffers = 65536;  // live buffer handles; 0: none
  // Graphs, and as many plans, one session keeps to run again by id; past
  // it the least recently used is dropped, and its client stores it again
  // when it next runs it (a resend, not an error). At least 1.
  size_t stored_graphs = 64;
  // Once a frame has begun, its remaining bytes must keep coming: a wait of
  // more than this for the next ones ends the connection (a client that
  // stalled mid-frame). The same bounds a reply the client does not read, and
  // a copy to another server. The wait between frames is not bounded (an idle
  // client is fine; TCP keepalive finds a peer that vanished). 0: no limit.
  std::chrono::milliseconds io_timeout = std::chrono::seconds(30);
  // A connection's TLS handshake, HELLO and AUTH together must be over this
  // long after it was accepted, however slowly their bytes come; 0: no limit.
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(10);
  // Connections still in that handshake ("pending") at once: one more makes
  // the server drop the oldest pending one (never an admitted client). 0: no
  // cap.
  size_t max_pending = 64;
  // Admitted clients at once: one more is refused in its handshake with an
  // error saying the server is full. 0: no cap.
  size_t max_clients = 256;
  // The servers this one may send to when a client asks (COPY_TO_PEER, a
  // plan's SEND_TO_PEER), as "host:port"; a request naming any other endpoint
  // is refused before anything connects. Empty: any endpoint a client names.
  std::vector<std::string> allowed_peers;
  // Weights this server reads from its own files when a client names them
  // (LocalWeights); null: only the weights cache.
  std::shared_ptr<const LocalWeights> local_weights;
};

struct ServerStats {
  uint64_t sessions = 0;      // live connections
  uint64_t live_buffers = 0;  // buffers allocated by all sessions, not yet freed
  uint64_t buffer_bytes = 0;  // their bytes
  uint64_t cache_entries = 0;
  uint64_t cache_hits = 0;
  // Since start, over all sessions: time in graph computations on the
  // devices, and time execution plans waited for bytes from other servers
  // (WAIT_FOR). For profiles (tensorpc bench).
  uint64_t compute_ns = 0;
  uint64_t peer_wait_ns = 0;
  uint64_t dropped_pending = 0;  // connections in their handshake dropped for newer ones (max_pending)
  // Ranges filled from ServerOptions::local_weights, and their bytes; and
  // ranges it offered whose bytes did not match their digest (sent instead).
  uint64_t local_weight_hits = 0;
  uint64_t local_weight_bytes = 0;
  uint64_t local_weight_mismatches = 0;
};

class Server {
 public:
  // Binds, listens and starts accepting on a thread of its own.
  static StatusOr<std::unique_ptr<Server>> start(ServerOptions options);
  virtual ~Server() = default;

  virtual uint16_t port() const = 0;
  virtual ServerStats stats() const = 0;
  // Stops accepting, ends every session (freeing what they own) and joins
  // all threads. Idempotent; the destructor calls it.
  virtual void stop() = 0;
  // Blocks until stop() has been called (from another thread or a signal handler's helper).
  virtual void wait() = 0;
};

}  // namespace tensorpc
