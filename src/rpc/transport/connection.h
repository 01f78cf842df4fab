// Connection: one socket to one tensorpc server, shared by every remote
// buffer and stream on that endpoint.
//
// A Connection is not a device: it says HELLO when it is opened (and, with a
// key, proves it and checks the server's proof: auth.h) and then carries
// requests. A mutex makes each request (and, for a call, its reply)
// one uninterrupted exchange, so any number of threads may use it. Requests
// gather their header, fixed fields and bulk bytes from the caller's memory
// into one sendmsg; a GET_TENSOR reply's bytes are received straight into the
// caller's destination.
//
// Lifetime: owned by shared_ptr. Remote buffers and streams hold strong
// references; the process-wide cache behind get_connection() holds only weak
// ones, so the socket closes when the last buffer and stream go. A transport
// or protocol failure marks the connection broken: its later requests fail
// at once, and get_connection() makes a new one; so does a connection whose
// server hung up while it sat idle (a server that restarted).
//
// Timeouts: opening (connect and HELLO) is bounded by its timeout. Each
// exchange may carry one too (Request::timeout, the last argument of the
// helpers): the longest it waits for the server to take its bytes or to send
// the next bytes of its reply. One that passes breaks the connection, since
// a reply may still come; its error names the command and the endpoint.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/lru.h"
#include "core/thread_annotations.h"
#include "rpc/wire/messages.h"
#include "rpc/transport/socket.h"
#include "tensorpc/endpoint.h"
#include "tensorpc/status.h"

namespace tensorpc::rpc {

// Connecting and HELLO, each, when the caller names no shorter time.
inline constexpr std::chrono::milliseconds kOpenTimeout = std::chrono::seconds(10);

class TlsContext;

// How a connection proves who it is and how its bytes travel, as a caller
// chose them (RemoteOptions::key and ::tls): unset parts come from the
// environment when a connection opens (client_key, client_tls).
struct ClientCredentials {
  std::optional<std::string> key;
  std::optional<TlsOptions> tls;

  bool operator==(const ClientCredentials&) const = default;
};
inline ClientCredentials credentials_of(const RemoteOptions& options) { return {options.key, options.tls}; }

class Connection {
 public:
  // One request: its encoded fixed fields and, after them, bulk bytes sent
  // from the caller's memory without a copy.
  struct Request {
    Command command = Command::ping;
    std::span<const uint8_t> fields = {};
    std::span<const uint8_t> bulk = {};
    uint16_t flags = 0;  // kFlagCache where wanted; kFlagNoReply is added by send_one_way
    // The longest the exchange waits for progress (see the top); 0: no limit.
    std::chrono::milliseconds timeout{0};
  };

  // Connects to `endpoint`, runs the TLS handshake when `tls` is given, and
  // says HELLO, each within `timeout`; a server of another major version is
  // an error naming both versions. With a `key` (non-empty), proves it to the
  // server and has the server prove it back (AUTH), within `timeout` too. A
  // server that has a key when this side has none, or the other way round,
  // or another key, is an error saying which.
  static StatusOr<std::shared_ptr<Connection>> open(const Endpoint& endpoint, const std::string& key = {},
                                                    const TlsContext* tls = nullptr,
                                                    std::chrono::milliseconds timeout = kOpenTimeout);
  ~Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends `request` and waits for its reply. Returns the reply's fields after
  // its status (for the caller to decode), or the server's error. When
  // `bulk_in` is not empty the reply ends with exactly that many bytes, which
  // are received straight into it.
  StatusOr<std::vector<uint8_t>> call(const Request& request, std::span<uint8_t> bulk_in = {});
  // call(), running `meanwhile` once the request is sent and before its reply
  // is read, while this connection stays held: the reply's wait overlaps
  // whatever `meanwhile` waits for. It must not use this connection, nor wait
  // for another connection's lock (try_settle()).
  StatusOr<std::vector<uint8_t>> call_meanwhile(const Request& request, std::span<uint8_t> bulk_in,
                                                const std::function<void()>& meanwhile);
  // Several requests in one round trip: sent back to back, then their
  // replies read in order (a server answers a connection's requests in
  // order). One result per request, as call() gives; a request the server
  // refuses does not stop the ones after it.
  std::vector<StatusOr<std::vector<uint8_t>>> call_all(std::span<const Request> requests);
  // Sends `request` flagged NO_REPLY and returns without waiting: a failure
  // on the server surfaces at the next SYNCHRONIZE.
  Status send_one_way(const Request& request);
  // As send_one_way, but the frame (copied) is held and goes out in front of
  // the next frame this connection sends, in the same system call. For the
  // few small writes that always come just before another request (a decode
  // step's inputs, then its PLAN_RUN): the server gets them in one segment
  // and wakes once, and the client makes one sendmsg instead of several.
  // Held frames are sent when more than kMaxHeldBytes would be held; they
  // are lost only with a connection that breaks or closes first (whose
  // buffers the server frees anyway).
  Status send_one_way_later(const Request& request);
  static constexpr size_t kMaxHeldBytes = 64 << 10;

  // A call whose request and reply are messages of messages.h.
  template <typename Req, typename Reply>
  Status call(Command command, const Req& req, Reply& reply, std::chrono::milliseconds timeout = {}) {
    WireWriter w;
    encode(w, req);
    auto fields = call({.command = command, .fields = w.bytes(), .timeout = timeout});
    if (!fields.ok()) return fields.status();
    WireReader r(fields.value());
    const Status s = decode(r, reply);
    if (!s.ok()) return fail(command, s);
    return Status();
  }
  // A call whose reply is only a status.
  template <typename Req>
  Status call(Command command, const Req& req, std::chrono::milliseconds timeout = {}) {
    WireWriter w;
    encode(w, req);
    return call_status_only(command, w.bytes(), timeout);
  }
  Status call_status_only(Command command, std::span<const uint8_t> fields, std::chrono::milliseconds timeout = {});

  // Stored graphs and plans. The server keeps what it was sent to run again
  // by id, as many as it likes, and drops the least recently used; this side
  // keeps its own record of what it sent (never the server's count) and runs
  // by id what it recorded. Such a run goes as a call whose reply is read
  // later ("unsettled"): at settle(), or before this connection sends
  // anything but another run by id or a read. A reply saying the server no
  // longer holds the graph or plan ("graph N not found") — or, from a 1.9
  // server, that the run was skipped after such a one — is answered by
  // storing it again under the same id and running it, before anything
  // sent later; a read that went out meanwhile is asked again. (A server
  // before 1.9 does not skip, so it is given one unsettled run at a time.)
  // Any other failure of a run is the error of the next synchronizing call
  // (SYNCHRONIZE, a read flagged SYNC) or of settle().
  //
  // Runs a graph (encoded by encode_graph; `handles`: the buffers it names)
  // on `device`: by id (GRAPH_RECOMPUTE) when this connection sent the same
  // encoding for the same device before, else whole under a new id
  // (GRAPH_COMPUTE, one-way).
  Status send_graph(uint32_t device, std::vector<uint8_t> graph, std::vector<uint64_t> handles,
                    std::chrono::milliseconds timeout = {});
  // Stores an execution plan (its steps encoded by plan_codec.h, `handles`:
  // the buffers they name) under a new id and runs it (PLAN_STORE, PLAN_RUN,
  // both one-way). Returns the plan's id.
  StatusOr<uint64_t> send_plan(std::vector<uint8_t> steps, std::vector<uint64_t> handles,
                               std::chrono::milliseconds timeout = {});
  // Runs the plan sent under `plan_id` again by id: true. False, sending
  // nothing, when this side no longer has its record (one of its buffers
  // was freed, or older records made room): the caller sends its steps
  // with send_plan.
  StatusOr<bool> run_stored_plan(uint64_t plan_id, std::chrono::milliseconds timeout = {});
  // Reads the replies of unsettled runs, storing again what the server no
  // longer held; then the first error among them since the last
  // synchronizing call. A 1.9 server replies as soon as it has found the
  // graph or plan (its run's own failure comes at the next synchronizing
  // call); an older one when the run is done.
  Status settle();
  // settle(), unless another thread holds the connection: then nothing
  // (nullopt), and that thread settles it before its own exchange.
  std::optional<Status> try_settle();
  // A standing grant for exactly (handle, offset, size) of this connection's
  // buffers: asked for once (GRANT_STANDING, a round trip), then remembered
  // for the life of the connection, so every plan naming that range agrees.
  StatusOr<GrantToken> standing_grant(uint64_t handle, uint64_t offset, uint64_t size,
                                      std::chrono::milliseconds timeout = {});
  // Makes sure a standing grant is held for every (handle, offset, size) in
  // `ranges`: those not held yet are asked for in one round trip (call_all),
  // so a plan with many hand-overs waits one link round trip for its grants,
  // not one per range. The first refusal is the error; the grants given
  // before and after it are kept.
  Status hold_standing_grants(std::span<const std::array<uint64_t, 3>> ranges, std::chrono::milliseconds timeout = {});
  // Forgets the standing grants asked for so far, so later plans ask for new
  // ones (after a failed run, bytes of that run may still arrive under the
  // old tokens; the next run must not take them for its own).
  void forget_standing_grants();
  // BUFFER_FREE, one-way. The server then drops every stored graph and plan
  // that names the buffer, and this connection its records of them.
  Status free_buffer(uint64_t handle, std::chrono::milliseconds timeout = {});

  const std::string& endpoint() const { return endpoint_; }
  const HelloReply& server_hello() const { return hello_; }
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // True when broken, or when idle and its server has hung up (marking it
  // broken). Never waits: a connection in the middle of an exchange counts as
  // alive.
  bool defunct();
  ConnectionStats stats() const;

 private:
  Connection(Socket socket, std::string endpoint) : socket_(std::move(socket)), endpoint_(std::move(endpoint)) {}

  // The header of `request` as a frame with these flags and id.
  static FrameHeader frame_header(const Request& request, uint16_t flags, uint64_t id);
  // The steps of one exchange; the caller holds mutex_.
  // Sends with `timeout` (Request::timeout) in force for this exchange.
  Status send_locked(const Request& request, uint16_t flags, uint64_t id) REQUIRES(mutex_);
  StatusOr<std::vector<uint8_t>> receive_reply_locked(Command command, uint64_t id, std::span<uint8_t> bulk_in)
      REQUIRES(mutex_);
  // The next frame's header, past any KEEPALIVE (which only shows the server
  // is alive: the socket's timeout counts from each).
  StatusOr<FrameHeader> receive_header_locked(Command command) REQUIRES(mutex_);
  // The next frame's header, a KEEPALIVE too.
  StatusOr<FrameHeader> receive_any_header_locked(Command command) REQUIRES(mutex_);
  // Fails when broken; for a one-way request also when the peer hung up.
  Status check_usable_locked(Command command, bool expect_silence) REQUIRES(mutex_);
  Status hello(const std::string& key, std::chrono::milliseconds timeout);
  // The AUTH exchange, after a HELLO reply that carried the server's nonce.
  Status authenticate(const std::string& key, const AuthNonce& server_nonce, std::chrono::milliseconds timeout);

  // `reason` prefixed with "<COMMAND> to <endpoint>: ", keeping its code.
  // hold_standing_grants with grants_mutex_ held: what standing_grant asks
  // through too, so one range and many are asked the same way.
  Status hold_standing_grants_locked(std::span<const std::array<uint64_t, 3>> ranges,
                                     std::chrono::milliseconds timeout) REQUIRES(grants_mutex_);
  Status fail(Command command, const Status& reason) const;
  // As fail(), and marks the connection broken: the byte stream can no
  // longer be trusted. Caller holds mutex_.
  Status break_locked(Command command, const Status& reason) REQUIRES(mutex_);

  // A graph or plan this side sent to be stored, as it was sent.
  struct Sent {
    Command store = Command::graph_compute;  // GRAPH_COMPUTE or PLAN_STORE
    uint32_t device = 0;                     // graphs only
    uint64_t id = 0;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    std::vector<uint64_t> handles;
  };
  // A run by id whose reply is not read yet.
  struct Unsettled {
    uint64_t request_id = 0;
    Command command = Command::plan_run;  // GRAPH_RECOMPUTE or PLAN_RUN
    Sent sent;
    std::chrono::milliseconds timeout{0};
  };
  // Records kept of each kind: more than a server keeps by default, so what
  // a server dropped is usually resent, not encoded anew.
  static constexpr size_t kSentRecords = 128;
  // Runs left unsettled at most: their replies wait in the socket's buffer.
  static constexpr size_t kMaxUnsettled = 1024;

  // Reads the unsettled runs' replies; from the first the server no longer
  // held, each is stored and run again (one-way). Other failures are kept
  // for the next synchronizing call. Whether it resent; an error only when
  // the connection broke.
  StatusOr<bool> settle_locked() REQUIRES(mutex_);
  // Sends `sent` whole and runs it (one-way).
  Status resend_locked(const Unsettled& run) REQUIRES(mutex_);
  // Sends a run by id of `sent` as a call flagged SYNC, its reply unsettled
  // (settling first when the server takes only one: see the top).
  Status run_by_id_locked(Command command, std::span<const uint8_t> fields, const Sent& sent,
                          std::chrono::milliseconds timeout) REQUIRES(mutex_);
  // A call: settles first, except for a read, which is sent first and asked
  // again when settling resent work that it must follow.
  StatusOr<std::vector<uint8_t>> call_locked(const Request& request, std::span<uint8_t> bulk_in,
                                             const std::function<void()>* meanwhile = nullptr) REQUIRES(mutex_);

  Mutex mutex_;  // one exchange at a time on the socket
  Socket socket_;
  // Frames of send_one_way_later, encoded, not sent yet.
  std::vector<uint8_t> held_ GUARDED_BY(mutex_);
  uint64_t held_requests_ GUARDED_BY(mutex_) = 0;
  const std::string endpoint_;
  HelloReply hello_;
  uint64_t next_request_id_ GUARDED_BY(mutex_) = 1;
  uint64_t next_graph_id_ GUARDED_BY(mutex_) = 1;  // never reused
  uint64_t next_plan_id_ GUARDED_BY(mutex_) = 1;   // never reused
  LruStore<size_t, Sent> graphs_ GUARDED_BY(mutex_);    // by a hash of their bytes
  LruStore<uint64_t, Sent> plans_ GUARDED_BY(mutex_);   // by id
  std::deque<Unsettled> unsettled_ GUARDED_BY(mutex_);  // in the order sent
  Status unsettled_error_ GUARDED_BY(mutex_);  // first failure of a settled run, until a synchronizing call
  // Standing grants by (handle, offset, size). Taken before mutex_ (never
  // the other way round), because asking for one is a call.
  Mutex grants_mutex_ ACQUIRED_BEFORE(mutex_);
  std::map<std::array<uint64_t, 3>, GrantToken> standing_grants_ GUARDED_BY(grants_mutex_);
  Status broken_reason_ GUARDED_BY(mutex_);
  std::atomic<bool> broken_{false};

  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> round_trips_{0};
  std::atomic<uint64_t> last_round_trip_ns_{0};  // the last call() from sending to its reply
  std::atomic<uint64_t> resent_{0};
};

// Live connections by endpoint. It holds only weak references (it never keeps
// a socket open) and is guarded by a mutex. The process has one, behind
// get_connection(endpoint); a server that copies to other servers keeps its
// own, so that in a process that is also a client (tests, benchmarks) the
// server's traffic never shares the client's socket or its counters.
class ConnectionCache {
 public:
  // The live connection to `endpoint` (text form as parse_endpoint reads it)
  // that was opened with the same `credentials`, shared when one exists, else
  // a new one (which then is the endpoint's entry), opened within
  // `open_timeout`.
  StatusOr<std::shared_ptr<Connection>> get(const std::string& endpoint, const ClientCredentials& credentials = {},
                                            std::chrono::milliseconds open_timeout = kOpenTimeout);
  // The endpoint's live connection if one exists; never connects.
  std::shared_ptr<Connection> find_live(const std::string& endpoint);

 private:
  struct Entry {
    std::weak_ptr<Connection> connection;
    ClientCredentials credentials;  // as asked for in get()
  };
  Mutex mutex_;
  std::unordered_map<std::string, Entry> by_endpoint_ GUARDED_BY(mutex_);
};

// get_connection and find_live_connection use the process-wide cache, the rpc
// layer's only mutable global.
StatusOr<std::shared_ptr<Connection>> get_connection(const std::string& endpoint,
                                                     const ClientCredentials& credentials = {},
                                                     std::chrono::milliseconds open_timeout = kOpenTimeout);
std::shared_ptr<Connection> find_live_connection(const std::string& endpoint);

}  // namespace tensorpc::rpc
