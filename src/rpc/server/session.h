// Session: the server side of one client connection.
//
// A session serves its connection's frames: it reads each, dispatches it
// through a table indexed by Command to one small handler, and replies.
// Every field is checked before use (docs/protocol.md). When the connection
// ends — EOF, an error, a protocol violation or Server::stop — run() returns
// and everything the session owns is freed.
//
// It owns little itself — the command table, the handshake's phase and
// nonce, the first error of commands sent without a reply — and composes
// one part per concern, each in its own file:
//   FrameChannel    the socket and the framing: the current frame, its
//                   payload, draining, replies, why the connection ended
//                   (frame_channel.h);
//   SessionBuffers  the buffers it allocated (by opaque u64 handles), its
//                   limits and its streams (session_buffers.h);
//   StoredWork      the graphs and plans it keeps to run again
//                   (stored_work.h);
//   PeerLinks       its connections to other servers (peer_links.h).
// The handlers, grouped by file: session_commands.cpp (devices, buffers,
// graphs), session_handshake.cpp (HELLO, AUTH: a server with a key serves a
// session only once its client has proven the key), session_cache.cpp (the
// weights cache), session_peer.cpp (server-to-server copies) and
// session_plan.cpp (execution plans: stored steps — graphs on the session's
// devices, copies between its buffers, sends to other servers and waits for
// their bytes — run in order by PLAN_RUN).
//
// Server-to-server copies are the one way another session reaches in: a
// WRITE_GRANTED served elsewhere writes into a buffer this session granted.
// Hence the buffer table is shared and locked (write_grants.h), and the
// session's grants are revoked when it ends.
//
// What a session may take is bounded (SessionEnv): bytes in buffers and live
// handles, refused at BUFFER_ALLOC; and a frame that stalls part-way, or a
// reply left unread, for longer than io_timeout ends the connection.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rpc/server/frame_channel.h"
#include "rpc/server/peer_links.h"
#include "rpc/server/session_buffers.h"
#include "rpc/server/session_env.h"
#include "rpc/server/stored_work.h"
#include "rpc/transport/socket.h"
#include "rpc/wire/messages.h"

namespace tensorpc::rpc {

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
  // From another thread (the server's keep-alive ticker): a KEEPALIVE to a
  // client that asked for them, when one is due (FrameChannel::keep_alive).
  void keep_alive(std::chrono::steady_clock::time_point now);
  // Whether its handshake is over and it was admitted (Admission): from any
  // thread. A session not admitted yet is "pending".
  bool admitted() const { return admitted_.load(std::memory_order_acquire); }

 private:
  using Reply = FrameReply;
  using Handler = Status (Session::*)(WireReader& in, Reply& out);
  // A command's handler, in the table the frame loop dispatches through
  // (session_commands.cpp fills it by Command).
  struct CommandSpec {
    Handler handler = nullptr;
    bool streams_payload = false;  // reads its own payload from the socket (SET_TENSOR)
  };
  static constexpr std::array<CommandSpec, kCommandCount> command_table();
  static const std::array<CommandSpec, kCommandCount> kCommands;

  // One frame: false when the connection must end.
  bool serve_frame();
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
  Status on_supports(WireReader& in, Reply& out);
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
  Status on_keepalive(WireReader& in, Reply& out);
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

  // ---- steps that need more than one part ----
  // Receives `size` payload bytes into [offset, +size) of entry (already
  // range-checked): straight into host memory, else through one staging vector.
  Status receive_into(BufferEntry& entry, uint64_t offset, uint64_t size, Sha256Hasher* hasher);
  // Writes the bytes the cache holds under e.sha256 into [e.offset, +e.size)
  // of entry (already range-checked) when they are exactly e.size bytes;
  // whether it did.
  StatusOr<bool> fill_from_cache(BufferEntry& entry, const SetTensorHashRequest& e);
  StatusOr<bool> fill_from_local_weights(BufferEntry& entry, const SetTensorHashRequest& e);
  // COPY_TO_PEER waits for the destination's reply (`wait_for_reply`); a
  // plan's SEND_TO_PEER does not: the destination's WAIT_FOR hears of it.
  Status send_to_peer(uint64_t src_handle, uint64_t src_offset, uint64_t size, const std::string& endpoint,
                      const GrantToken& token, bool wait_for_reply);
  // WAIT_FOR: until bytes arrived under the step's standing grant since the
  // last wait, the step's timeout, or shutdown().
  Status wait_for_arrival(const PlanStepFields& step);
  // A write grant on (handle, offset, size) of this session, range-checked
  // now; `arrivals` null for a single-use grant, set for a standing one.
  StatusOr<GrantToken> issue_grant(uint64_t handle, uint64_t offset, uint64_t size, const char* what,
                                   std::shared_ptr<GrantArrivals> arrivals);
  void release_all();
  // The connection has ended: the waits for bytes it would have brought fail.
  void tell_fed_grants();
  void remember_fed(const std::shared_ptr<GrantArrivals>& arrivals);
  // A plan run failed at `failed_step`: the peers its later sends go to are told.
  void tell_unsent(const StoredPlan& plan, size_t failed_step);
  // The handshake is over (phase_ is serving): lifts its deadline and asks
  // env_.admission for a place; the refusal when the server is full.
  Status enter_serving();
  // The graph or plan a run by id names, or why it does not run: dropped
  // (not found), or skipped after a dropped one (skipping_runs_).
  StatusOr<StoredGraph*> graph_to_run(uint64_t id, uint32_t device);
  StatusOr<StoredPlan*> plan_to_run(uint64_t id);
  bool answers_early() const;  // the current frame wants a reply

  const SessionEnv& env_;
  const uint64_t id_;
  FrameChannel channel_;
  SessionBuffers buffers_;
  StoredWork work_;  // after buffers_: its graphs point into them
  PeerLinks peers_;
  // The standing grants this connection brought bytes to (a peer server's
  // plan sends), told when it ends (GrantArrivals::sender_gone).
  std::vector<std::weak_ptr<GrantArrivals>> fed_;

  // Where the connection stands: HELLO first; then, when the server has a
  // key, AUTH; then any command.
  enum class Phase { awaiting_hello, awaiting_auth, serving };
  Phase phase_ = Phase::awaiting_hello;
  AuthNonce server_nonce_{};           // sent in the HELLO reply; both proofs cover it
  Status pending_;                     // first error of a NO_REPLY command, until SYNCHRONIZE
  // A run by id flagged SYNC named a graph or plan that work_ no longer
  // holds: later such runs are skipped (kSkippedRun) until another command,
  // so none runs ahead of the one its client will store and run again.
  bool skipping_runs_ = false;
  bool keepalives_asked_ = false;  // HELLO's kFeatureKeepAlive: given once admitted
  std::atomic<bool> stopping_{false};  // shutdown() was called: waits end
  std::atomic<bool> admitted_{false};  // counted by env_.admission until run() ends
};

}  // namespace tensorpc::rpc
