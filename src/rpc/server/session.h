// Session: the server side of one client connection.
//
// A session owns everything its connection created: the buffers (named to
// the client by u64 handles it issues, never 0, never reused), the graphs it
// decoded (by the client's graph_id, the 16 most recent), one stream per
// device it computed on, and the first error of commands sent without a
// reply. It reads frames, dispatches each through a table indexed by
// Command to one small handler, and writes replies. Every field is checked
// before use (docs/protocol.md). When the connection ends — EOF, an error, a
// protocol violation or Server::stop — run() returns and every buffer is freed.
//
// Server-to-server copies (session_peer.cpp) are the one way another session
// reaches in: a WRITE_GRANTED served elsewhere writes into a buffer this
// session granted. Hence the buffer table is shared and locked (see
// write_grants.h), and the session's grants are revoked when it ends.
//
// A server with a key serves a session only once its client has proven the
// key (session_handshake.cpp): HELLO, then AUTH, then everything else.
//
// What a session may take is bounded (SessionEnv): bytes in buffers and live
// handles, refused at BUFFER_ALLOC; and a frame that stalls part-way, or a
// reply left unread, for longer than io_timeout ends the connection.
//
// Execution plans (session_plan.cpp) are stored steps — graphs on the
// session's devices, copies between its buffers, sends to other servers and
// waits for their bytes — run in order by PLAN_RUN (docs/protocol.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "rpc/transport/connection.h"
#include "rpc/wire/graph_codec.h"
#include "rpc/wire/messages.h"
#include "rpc/wire/plan_codec.h"
#include "rpc/transport/socket.h"
#include "rpc/transport/tls.h"
#include "rpc/server/weights_cache.h"
#include "rpc/server/write_grants.h"
#include "tensorpc/device.h"

namespace tensorpc::rpc {

// Shared by the frame loop (session.cpp) and the handlers (session_commands.cpp).
Status protocol_error(std::string msg);
// A descriptor naming `size` bytes at `offset` of buf, for the Buffer calls
// that take a tensor when the bytes are not host-addressable.
StatusOr<Tensor> byte_span(Buffer& buf, uint64_t offset, uint64_t size);

// Counters every session of a server adds to (ServerStats).
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

struct SessionCounters {
  std::atomic<uint64_t> live_buffers{0};
  std::atomic<uint64_t> buffer_bytes{0};
  std::atomic<uint64_t> compute_ns{0};    // time spent in graph computations, all sessions
  std::atomic<uint64_t> peer_wait_ns{0};  // time plans spent in WAIT_FOR
  std::atomic<uint64_t> held_sends{0};    // plan sends that left with the next one to their peer
};

// What a session shares with the server and its other sessions.
struct SessionEnv {
  std::vector<std::shared_ptr<Device>> devices;
  WeightsCache* cache = nullptr;
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
  std::vector<std::string> allowed_peers;  // endpoints (Endpoint::to_string) a send may go to; empty: any
  uint32_t max_plan_wait_ms = 10 * 60 * 1000;  // the longest WAIT_FOR a plan may store (≤ kMaxPlanWaitMs)
  // Limits of one session (ServerOptions); 0: none.
  uint64_t max_session_memory = 0;   // bytes in buffers across all devices
  uint64_t max_session_buffers = 0;  // live buffer handles
  // The longest a started frame, a reply or a call to another server waits
  // for progress (Socket::set_io_timeout); 0: no limit.
  std::chrono::milliseconds io_timeout{0};
};

inline constexpr size_t kMaxStoredGraphs = 16;
inline constexpr size_t kMaxStoredPlans = 16;

class Session {
 public:
  Session(Socket socket, const SessionEnv& env, uint64_t id);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Serves frames until the connection ends, then frees what it owns and
  // closes the socket.
  void run();
  // From another thread: makes run() return soon (wakes a blocked recv).
  void shutdown();

 private:
  struct StoredGraph {
    uint64_t id = 0;
    uint32_t device = 0;
    DecodedGraph graph;
    std::vector<uint64_t> handles;  // buffers it uses: freeing one forgets the graph
  };
  struct PlanStep {
    PlanStepFields fields;
    DecodedGraph graph;  // COMPUTE only
    // COMPUTE only: the plan's last; after it, no device needs its threads
    // kept awake for the plan (Device::expect_idle).
    bool last_compute = false;
    // SEND_TO_PEER only: the next step sends to the same peer and this send
    // is small (16 KiB at most), so its frame is held and goes out in front
    // of the next, in one write: the receiver wakes once for the lot
    // (Connection::send_one_way_later).
    bool ride_with_next = false;
  };
  struct StoredPlan {
    uint64_t id = 0;
    std::vector<PlanStep> steps;
    std::vector<uint64_t> handles;          // buffers it uses: freeing one forgets the plan
    std::vector<uint32_t> compute_devices;  // each device a step computes on, once
  };
  // What a handler returns besides its status: reply fields, and bulk bytes
  // sent after them without copying (GET_TENSOR).
  struct Reply {
    WireWriter fields;
    std::span<const uint8_t> bulk;
    std::vector<uint8_t> bulk_storage;  // when the bytes are not host-addressable
  };
  using Handler = Status (Session::*)(WireReader& in, Reply& out);
  struct CommandSpec {
    Handler handler;
    bool streams_payload;  // reads its own payload from the socket (SET_TENSOR)
  };
  static const CommandSpec kCommands[kCommandCount];

  // One frame: false when the connection must end.
  bool serve_frame();
  Status read_payload(uint64_t length);
  Status drain(uint64_t length);
  Status send_reply(const Status& status, Reply& reply);
  uint64_t payload_limit(Command command) const;
  // Ok when `command` may be served in the current phase; otherwise the
  // protocol error that refuses it and ends the connection (session_handshake.cpp).
  Status admit(Command command) const;

  // ---- handlers, one per command ----
  // The handshake (session_handshake.cpp).
  Status on_hello(WireReader& in, Reply& out);
  Status on_auth(WireReader& in, Reply& out);
  Status on_list_devices(WireReader& in, Reply& out);
  Status on_device_memory(WireReader& in, Reply& out);
  Status on_buffer_alloc(WireReader& in, Reply& out);
  Status on_buffer_free(WireReader& in, Reply& out);
  Status on_buffer_clear(WireReader& in, Reply& out);
  Status on_set_tensor(WireReader& in, Reply& out);
  Status on_get_tensor(WireReader& in, Reply& out);
  Status on_copy_tensor(WireReader& in, Reply& out);
  Status on_graph_compute(WireReader& in, Reply& out);
  Status on_graph_recompute(WireReader& in, Reply& out);
  Status on_synchronize(WireReader& in, Reply& out);
  Status on_ping(WireReader& in, Reply& out);
  // Server-to-server copies (session_peer.cpp).
  Status on_grant_write(WireReader& in, Reply& out);
  Status on_copy_to_peer(WireReader& in, Reply& out);
  Status on_write_granted(WireReader& in, Reply& out);
  // The weights cache (session_cache.cpp).
  Status on_set_tensor_hash(WireReader& in, Reply& out);
  Status on_set_tensor_hashes(WireReader& in, Reply& out);
  // Execution plans (session_plan.cpp).
  Status on_grant_standing(WireReader& in, Reply& out);
  Status on_plan_store(WireReader& in, Reply& out);
  Status on_plan_run(WireReader& in, Reply& out);

  // ---- checks shared by the handlers ----
  // Entries stay valid until this session's own thread erases them.
  StatusOr<BufferEntry*> find_buffer(uint64_t handle);
  // The buffer of handle, checked to hold bytes [offset, offset + size).
  StatusOr<BufferEntry*> find_range(uint64_t handle, uint64_t offset, uint64_t size, const char* what);
  Status check_device(uint32_t device) const;
  // The session's limits (SessionEnv) allow one more buffer of `size` bytes.
  Status check_session_limits(uint64_t size) const;
  // Writes the bytes the cache holds under e.sha256 into [e.offset, +e.size)
  // of entry (already range-checked) when they are exactly e.size bytes;
  // whether it did.
  StatusOr<bool> fill_from_cache(BufferEntry& entry, const SetTensorHashRequest& e);
  Status receive_into(BufferEntry& entry, uint64_t offset, uint64_t size, Sha256Hasher* hasher);
  Status write_bytes(BufferEntry& entry, uint64_t offset, const uint8_t* src, uint64_t size);
  Status read_bytes(BufferEntry& entry, uint64_t offset, uint8_t* dst, uint64_t size);
  StatusOr<Stream*> stream_of(uint32_t device);
  Status run_graph(StoredGraph& g);
  // The steps shared by single commands and plan steps.
  Status compute_on(uint32_t device, Graph& g);
  Status copy_range(uint64_t src_handle, uint64_t src_offset, uint64_t dst_handle, uint64_t dst_offset, uint64_t size);
  // COPY_TO_PEER waits for the destination's reply (`wait_for_reply`); a
  // plan's SEND_TO_PEER does not: the destination's WAIT_FOR hears of it.
  // `hold`: the frame leaves with the next one sent to that peer.
  Status send_to_peer(uint64_t src_handle, uint64_t src_offset, uint64_t size, const std::string& endpoint,
                      const GrantToken& token, bool wait_for_reply, bool hold = false);
  // WAIT_FOR: until bytes arrived under the step's standing grant since the
  // last wait, the step's timeout, or shutdown().
  Status wait_for_arrival(const PlanStepFields& step);
  // Drops stored graphs and plans that name `handle` (being freed).
  void forget_users_of(uint64_t handle);
  void release_all();
  // Reads and discards `n` payload bytes, then returns `why`; a failure to
  // read ends the connection.
  Status fail_draining(uint64_t n, Status why);
  // Reads the fixed fields that lead a streamed payload (SET_TENSOR,
  // WRITE_GRANTED) and checks exactly req.size bytes of data follow; on a
  // mismatch the rest of the payload is drained so the next frame is found.
  template <typename Request>
  Status read_streamed_fields(const char* command, size_t fixed_size, Request& req);
  // A write grant on (handle, offset, size) of this session, range-checked
  // now; `arrivals` null for a single-use grant, set for a standing one.
  StatusOr<GrantToken> issue_grant(uint64_t handle, uint64_t offset, uint64_t size, const char* what,
                                   std::shared_ptr<GrantArrivals> arrivals);
  // The connection to another server, opened on first use and kept for this
  // session's life.
  StatusOr<std::shared_ptr<Connection>> peer(const std::string& endpoint);
  // Whether a send to `endpoint` is allowed (SessionEnv::allowed_peers).
  Status check_peer_allowed(const std::string& endpoint) const;

  Socket socket_;
  std::mutex socket_mutex_;  // shutdown() from another thread vs. close at the end of run()
  const SessionEnv& env_;
  const uint64_t id_;
  std::string peer_;

  FrameHeader current_;  // the frame being served
  std::vector<uint8_t> payload_;
  // Where the connection stands: HELLO first; then, when the server has a
  // key, AUTH; then any command.
  enum class Phase { awaiting_hello, awaiting_auth, serving };
  Phase phase_ = Phase::awaiting_hello;
  AuthNonce server_nonce_{};  // sent in the HELLO reply; both proofs cover it
  bool closing_ = false;      // end the connection after this frame's reply
  Status pending_;            // first error of a NO_REPLY command, until SYNCHRONIZE
  std::string end_reason_ = "connection closed by peer";

  // Shared with the server's WriteGrants (a granted write from another
  // session looks into it); see write_grants.h for its locking.
  const std::shared_ptr<BufferTable> table_ = std::make_shared<BufferTable>();
  std::unordered_map<std::string, std::shared_ptr<Connection>> peers_;  // by endpoint
  uint64_t next_handle_ = 1;
  uint64_t largest_buffer_ = 0;                   // bounds SET_TENSOR payloads
  uint64_t held_bytes_ = 0;                       // bytes of the buffers in table_
  std::deque<StoredGraph> graphs_;                // most recently stored first
  std::deque<StoredPlan> plans_;                  // most recently stored first
  std::atomic<bool> stopping_{false};             // shutdown() was called: waits end
  std::vector<std::unique_ptr<Stream>> streams_;  // by device index, created on first use
};

}  // namespace tensorpc::rpc
