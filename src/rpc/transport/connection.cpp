// Connection: framing of requests and replies on one socket, the HELLO
// handshake (with AUTH when there is a key), and the process-wide cache of
// live connections.
#include "rpc/transport/connection.h"

#include <poll.h>

#include <algorithm>
#include <functional>
#include <string_view>
#include <utility>

#include "rpc/transport/auth.h"
#include "rpc/transport/tls.h"

namespace tensorpc::rpc {
namespace {


// The fixed fields of a reply are small (LIST_DEVICES is the largest); a
// length beyond this is a peer gone wrong, not a reason to allocate.
constexpr uint64_t kMaxReplyFields = uint64_t{16} << 20;

std::string version_string(uint32_t major, uint32_t minor, uint32_t patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

StatusOr<std::shared_ptr<Connection>> Connection::open(const Endpoint& endpoint, const std::string& key,
                                                       const TlsContext* tls, std::chrono::milliseconds timeout) {
  const std::string name = endpoint.to_string();
  auto socket = Socket::connect(endpoint.host, endpoint.port, timeout);
  if (!socket.ok()) {
    const Status& s = socket.status();
    return Status(s.code(), "cannot connect to " + name + ": " + s.message());
  }
  if (tls != nullptr) {
    const Status s = socket.value().start_tls(*tls, endpoint.host, timeout);
    if (!s.ok()) {
      // A server without TLS reads the handshake as a bad frame and hangs up.
      return Status(s.code(), "cannot connect to " + name + ": " + s.message() +
                                  " (does the server speak TLS? it does when started with --tls-cert)");
    }
  }
  // Not make_shared: the constructor is private.
  std::shared_ptr<Connection> c(new Connection(std::move(socket).value(), name));
  const Status said = c->hello(key, timeout);
  if (!said.ok() && tls == nullptr && said.code() == StatusCode::io_error) {
    // A TLS server hangs up on the plain HELLO, which reads as no TLS record.
    return Status(said.code(), said.message() +
                                   " (if the server was started with --tls-cert, it speaks only TLS: "
                                   "connect with --tls-ca or " +
                                   kTlsCaVariable + ")");
  }
  TENSORPC_RETURN_IF_ERROR(said);
  return c;
}

// Bounded even without a caller's timeout: a server that accepts but never
// answers (stopped, or not a tensorpc server) must not hang the opener, who
// may hold the connection cache's lock.
Status Connection::hello(const std::string& key, std::chrono::milliseconds timeout) {
  HelloRequest request;
  request.client = "tensorpc client " + version_string(kVersionMajor, kVersionMinor, kVersionPatch);
  if (!key.empty()) request.features |= kFeatureKey;
  // While the server works on what this side waits for, it says so every
  // kKeepAliveInterval: a timeout then tells a frozen server from a long
  // computation.
  request.features |= kFeatureKeepAlive;
  HelloReply reply;
  TENSORPC_RETURN_IF_ERROR(call(Command::hello, request, reply, timeout));
  if (reply.major != kVersionMajor) {
    MutexLock lock(mutex_);
    return break_locked(Command::hello,
                        protocol_error("server speaks " + version_string(reply.major, reply.minor, reply.patch) +
                                       ", this client " + version_string(kVersionMajor, kVersionMinor, kVersionPatch)));
  }
  // A server with a key refuses a client without one in its HELLO reply; the
  // other mismatch is this side's to refuse.
  if (!key.empty() && (reply.features & kFeatureKey) == 0) {
    MutexLock lock(mutex_);
    return break_locked(Command::hello, invalid_argument("this client has a key, and the server has none: start the "
                                                         "server with --key-file, or connect without a key"));
  }
  const AuthNonce server_nonce = reply.server_nonce;
  hello_ = std::move(reply);
  if (key.empty()) return Status();
  return authenticate(key, server_nonce, timeout);
}

Status Connection::authenticate(const std::string& key, const AuthNonce& server_nonce,
                                std::chrono::milliseconds timeout) {
  auto client_nonce = fresh_nonce();
  if (!client_nonce.ok()) return fail(Command::auth, client_nonce.status());
  auto proof = auth_proof(key, AuthRole::client, client_nonce.value(), server_nonce);
  if (!proof.ok()) return fail(Command::auth, proof.status());
  AuthReply reply;
  TENSORPC_RETURN_IF_ERROR(call(
      Command::auth, AuthRequest{.client_nonce = client_nonce.value(), .client_proof = proof.value()}, reply, timeout));
  // The server answered, so it took our proof; now it must prove the key too.
  auto expected = auth_proof(key, AuthRole::server, client_nonce.value(), server_nonce);
  if (!expected.ok()) return fail(Command::auth, expected.status());
  if (!proof_matches(expected.value(), reply.server_proof)) {
    MutexLock lock(mutex_);
    return break_locked(Command::auth, invalid_argument("authentication failed: the server's proof does not match "
                                                        "this client's key (it is not the server it claims to be)"));
  }
  return Status();
}

StatusOr<std::vector<uint8_t>> Connection::call(const Request& request, std::span<uint8_t> bulk_in) {
  MutexLock lock(mutex_);
  return call_locked(request, bulk_in);
}

StatusOr<std::vector<uint8_t>> Connection::call_meanwhile(const Request& request, std::span<uint8_t> bulk_in,
                                                          const std::function<void()>& meanwhile) {
  MutexLock lock(mutex_);
  return call_locked(request, bulk_in, &meanwhile);
}

StatusOr<std::vector<uint8_t>> Connection::call_locked(const Request& request, std::span<uint8_t> bulk_in,
                                                       const std::function<void()>* meanwhile) {
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(request.command, /*expect_silence=*/false));
  const bool read_first = !unsettled_.empty() && only_reads(request.command);
  if (!read_first) TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  uint64_t id = next_request_id_++;
  const auto sent = std::chrono::steady_clock::now();
  TENSORPC_RETURN_IF_ERROR(send_locked(request, request.flags, id));
  round_trips_.fetch_add(1, std::memory_order_relaxed);
  if (meanwhile != nullptr) (*meanwhile)();
  if (read_first) {
    auto resent = settle_locked();
    if (!resent.ok()) return resent.status();
    if (resent.value()) {
      // Served before the work resent ahead of it: read, then ask again.
      auto stale = receive_reply_locked(request.command, id, bulk_in);
      if (broken()) return stale.status();
      id = next_request_id_++;
      TENSORPC_RETURN_IF_ERROR(send_locked(request, request.flags, id));
    }
  }
  auto reply = receive_reply_locked(request.command, id, bulk_in);
  last_round_trip_ns_.store(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                      std::chrono::steady_clock::now() - sent)
                                                      .count()),
                            std::memory_order_relaxed);
  // A synchronizing call answers for the runs settled before it too.
  const bool synchronizes = request.command == Command::synchronize || (request.flags & kFlagSync) != 0;
  if (synchronizes && !unsettled_error_.ok() && !broken()) return std::exchange(unsettled_error_, Status());
  return reply;
}

std::vector<StatusOr<std::vector<uint8_t>>> Connection::call_all(std::span<const Request> requests) {
  std::vector<StatusOr<std::vector<uint8_t>>> results;
  results.reserve(requests.size());
  MutexLock lock(mutex_);
  std::vector<uint64_t> ids;
  ids.reserve(requests.size());
  Status failed = settle_locked().status();
  for (const Request& request : requests) {
    if (!failed.ok()) break;
    failed = check_usable_locked(request.command, /*expect_silence=*/false);
    if (failed.ok()) failed = send_locked(request, request.flags, next_request_id_);
    if (!failed.ok()) break;
    ids.push_back(next_request_id_++);
  }
  if (!ids.empty()) round_trips_.fetch_add(1, std::memory_order_relaxed);
  // Every request that went out has its reply read, so the stream stays in step.
  for (size_t i = 0; i < ids.size(); ++i) results.push_back(receive_reply_locked(requests[i].command, ids[i], {}));
  while (results.size() < requests.size()) results.push_back(failed.ok() ? internal_error("not sent") : failed);
  return results;
}

Status Connection::call_status_only(Command command, std::span<const uint8_t> fields,
                                    std::chrono::milliseconds timeout) {
  auto reply = call({.command = command, .fields = fields, .timeout = timeout});
  if (!reply.ok()) return reply.status();
  if (!reply.value().empty()) {
    MutexLock lock(mutex_);
    return break_locked(command, protocol_error("reply has " + std::to_string(reply.value().size()) +
                                                " unexpected bytes after its status"));
  }
  return Status();
}

Status Connection::send_one_way(const Request& request) {
  MutexLock lock(mutex_);
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(request.command, /*expect_silence=*/true));
  return send_locked(request, request.flags | kFlagNoReply, next_request_id_++);
}

FrameHeader Connection::frame_header(const Request& request, uint16_t flags, uint64_t id) {
  FrameHeader h;
  h.command = request.command;
  h.flags = flags;
  h.request_id = id;
  h.payload_length = request.fields.size() + request.bulk.size();
  return h;
}

Status Connection::send_one_way_later(const Request& request) {
  MutexLock lock(mutex_);
  // Held frames go out with the next exchange, which must not find a run
  // to resend ahead of them.
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  const size_t frame = kFrameHeaderSize + request.fields.size() + request.bulk.size();
  if (held_.size() + frame > kMaxHeldBytes) {  // sent now, behind what is held
    TENSORPC_RETURN_IF_ERROR(check_usable_locked(request.command, /*expect_silence=*/true));
    return send_locked(request, request.flags | kFlagNoReply, next_request_id_++);
  }
  // The poll for a hung-up server waits for the frame that carries this one.
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(request.command, /*expect_silence=*/false));
  const size_t at = held_.size();
  held_.resize(at + frame);
  encode_header(frame_header(request, request.flags | kFlagNoReply, next_request_id_++), held_.data() + at);
  std::copy(request.fields.begin(), request.fields.end(),
            held_.begin() + static_cast<ptrdiff_t>(at + kFrameHeaderSize));
  std::copy(request.bulk.begin(), request.bulk.end(),
            held_.begin() + static_cast<ptrdiff_t>(at + kFrameHeaderSize + request.fields.size()));
  ++held_requests_;
  return Status();
}

Status Connection::send_graph(uint32_t device, std::vector<uint8_t> graph, std::vector<uint64_t> handles,
                              std::chrono::milliseconds timeout) {
  const size_t hash =
      std::hash<std::string_view>()(std::string_view(reinterpret_cast<const char*>(graph.data()), graph.size()));
  MutexLock lock(mutex_);
  if (const Sent* sent = graphs_.find(hash); sent != nullptr && sent->device == device && *sent->bytes == graph) {
    WireWriter w;
    encode(w, GraphRecomputeRequest{.device = device, .graph_id = sent->id});
    return run_by_id_locked(Command::graph_recompute, w.bytes(), *sent, timeout);
  }
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(Command::graph_compute, /*expect_silence=*/true));
  // Ids are never reused: a graph the server dropped is "not found", never
  // silently another graph.
  const uint64_t graph_id = next_graph_id_++;
  WireWriter w;
  encode(w, GraphComputeRequest{.device = device, .graph_id = graph_id});
  TENSORPC_RETURN_IF_ERROR(
      send_locked({.command = Command::graph_compute, .fields = w.bytes(), .bulk = graph, .timeout = timeout},
                  kFlagNoReply, next_request_id_++));
  graphs_.put(hash, Sent{.store = Command::graph_compute,
                         .device = device,
                         .id = graph_id,
                         .bytes = std::make_shared<const std::vector<uint8_t>>(std::move(graph)),
                         .handles = std::move(handles)});
  graphs_.trim_to(kSentRecords);
  return Status();
}

StatusOr<uint64_t> Connection::send_plan(std::vector<uint8_t> steps, std::vector<uint64_t> handles,
                                         std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(Command::plan_store, /*expect_silence=*/true));
  const uint64_t plan_id = next_plan_id_++;
  const Sent& sent = plans_.put(plan_id, Sent{.store = Command::plan_store,
                                              .id = plan_id,
                                              .bytes = std::make_shared<const std::vector<uint8_t>>(std::move(steps)),
                                              .handles = std::move(handles)});
  TENSORPC_RETURN_IF_ERROR(resend_locked({.sent = sent, .timeout = timeout}));
  plans_.trim_to(kSentRecords);
  return plan_id;
}

StatusOr<bool> Connection::run_stored_plan(uint64_t plan_id, std::chrono::milliseconds timeout) {
  MutexLock lock(mutex_);
  const Sent* sent = plans_.find(plan_id);
  if (sent == nullptr) return false;
  WireWriter w;
  encode(w, PlanRunRequest{.plan_id = plan_id});
  TENSORPC_RETURN_IF_ERROR(run_by_id_locked(Command::plan_run, w.bytes(), *sent, timeout));
  return true;
}

Status Connection::settle() {
  MutexLock lock(mutex_);
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  return std::exchange(unsettled_error_, Status());
}

std::optional<Status> Connection::try_settle() {
  if (!mutex_.try_lock()) return std::nullopt;
  Status s = settle_locked().status();
  if (s.ok()) s = std::exchange(unsettled_error_, Status());
  mutex_.unlock();
  return s;
}

Status Connection::run_by_id_locked(Command command, std::span<const uint8_t> fields, const Sent& sent,
                                    std::chrono::milliseconds timeout) {
  const bool skips = hello_.major > 1 || hello_.minor >= kSkipAfterDroppedMinor;
  if (!skips || unsettled_.size() >= kMaxUnsettled) TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  // Not polled for a hang-up while replies are on their way.
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(command, /*expect_silence=*/unsettled_.empty()));
  const uint64_t id = next_request_id_++;
  // SYNC: after an earlier one-way failure the run does not happen, and
  // that failure is its reply.
  TENSORPC_RETURN_IF_ERROR(send_locked({.command = command, .fields = fields, .timeout = timeout}, kFlagSync, id));
  unsettled_.push_back({.request_id = id, .command = command, .sent = sent, .timeout = timeout});
  return Status();
}

StatusOr<bool> Connection::settle_locked() {
  if (unsettled_.empty()) return false;
  std::deque<Unsettled> runs;
  runs.swap(unsettled_);
  size_t first_dropped = runs.size();
  for (size_t i = 0; i < runs.size(); ++i) {
    const Unsettled& run = runs[i];
    auto reply = receive_reply_locked(run.command, run.request_id, {});
    if (broken()) return reply.status();
    const std::string kind = run.sent.store == Command::plan_store ? "plan " : "graph ";
    const Status status = reply.status();  // a copy: status() returns one
    const std::string& message = status.message();
    const bool dropped = !reply.ok() && status.code() == StatusCode::not_found &&
                         (message.find(kind + std::to_string(run.sent.id) + " not found") != std::string::npos ||
                          message.find(kSkippedRun) != std::string::npos);
    if (dropped) {
      first_dropped = std::min(first_dropped, i);
    } else if (first_dropped < i) {
      // The server ran it ahead of one it dropped: their order is lost.
      return break_locked(run.command, protocol_error("a run by id was served after an earlier one was dropped"));
    } else if (reply.ok() && !reply.value().empty()) {
      return break_locked(run.command, protocol_error("reply has unexpected bytes"));
    } else if (!reply.ok() && unsettled_error_.ok()) {
      unsettled_error_ = reply.status();
    }
  }
  for (size_t i = first_dropped; i < runs.size(); ++i) {
    TENSORPC_RETURN_IF_ERROR(resend_locked(runs[i]));
    resent_.fetch_add(1, std::memory_order_relaxed);
  }
  return first_dropped < runs.size();
}

Status Connection::resend_locked(const Unsettled& run) {
  const Sent& sent = run.sent;
  // Not polled for a hang-up: a read's reply may be on its way (call_locked).
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(sent.store, /*expect_silence=*/false));
  WireWriter w;
  if (sent.store == Command::graph_compute) {
    encode(w, GraphComputeRequest{.device = sent.device, .graph_id = sent.id});
  } else {
    encode(w, PlanStoreRequest{.plan_id = sent.id});
  }
  TENSORPC_RETURN_IF_ERROR(
      send_locked({.command = sent.store, .fields = w.bytes(), .bulk = *sent.bytes, .timeout = run.timeout},
                  kFlagNoReply, next_request_id_++));
  if (sent.store == Command::graph_compute) return Status();  // GRAPH_COMPUTE runs what it stores
  WireWriter run_fields;
  encode(run_fields, PlanRunRequest{.plan_id = sent.id});
  return send_locked({.command = Command::plan_run, .fields = run_fields.bytes(), .timeout = run.timeout},
                     kFlagNoReply, next_request_id_++);
}

StatusOr<GrantToken> Connection::standing_grant(uint64_t handle, uint64_t offset, uint64_t size,
                                                std::chrono::milliseconds timeout) {
  MutexLock lock(grants_mutex_);
  const std::array<uint64_t, 3> key{handle, offset, size};
  TENSORPC_RETURN_IF_ERROR(hold_standing_grants_locked(std::span(&key, 1), timeout));
  return standing_grants_.at(key);
}

Status Connection::hold_standing_grants(std::span<const std::array<uint64_t, 3>> ranges,
                                        std::chrono::milliseconds timeout) {
  MutexLock lock(grants_mutex_);
  return hold_standing_grants_locked(ranges, timeout);
}

Status Connection::hold_standing_grants_locked(std::span<const std::array<uint64_t, 3>> ranges,
                                               std::chrono::milliseconds timeout) {
  std::vector<std::array<uint64_t, 3>> missing;
  for (const auto& range : ranges) {
    if (standing_grants_.count(range) == 0 && std::find(missing.begin(), missing.end(), range) == missing.end()) {
      missing.push_back(range);
    }
  }
  if (missing.empty()) return Status();
  std::vector<std::vector<uint8_t>> fields;
  std::vector<Request> requests;
  fields.reserve(missing.size());
  for (const auto& [handle, offset, size] : missing) {
    WireWriter w;
    encode(w, GrantStandingRequest{.handle = handle, .offset = offset, .size = size});
    fields.push_back(std::move(w.bytes()));
    requests.push_back({.command = Command::grant_standing, .fields = fields.back(), .timeout = timeout});
  }
  auto replies = call_all(requests);
  Status first_failure;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (!replies[i].ok()) {
      if (first_failure.ok()) first_failure = replies[i].status();
      continue;
    }
    WireReader r(replies[i].value());
    GrantStandingReply reply;
    const Status s = decode(r, reply);
    if (!s.ok()) {
      if (first_failure.ok()) first_failure = fail(Command::grant_standing, s);
      continue;
    }
    standing_grants_.emplace(missing[i], reply.token);
  }
  return first_failure;
}

void Connection::forget_standing_grants() {
  MutexLock lock(grants_mutex_);
  standing_grants_.clear();
}

Status Connection::free_buffer(uint64_t handle, std::chrono::milliseconds timeout) {
  WireWriter w;
  encode(w, BufferFreeRequest{.handle = handle});
  MutexLock lock(mutex_);
  TENSORPC_RETURN_IF_ERROR(settle_locked().status());
  const auto uses = [handle](const auto&, const Sent& sent) {
    return std::find(sent.handles.begin(), sent.handles.end(), handle) != sent.handles.end();
  };
  graphs_.erase_if(uses);
  plans_.erase_if(uses);
  TENSORPC_RETURN_IF_ERROR(check_usable_locked(Command::buffer_free, /*expect_silence=*/true));
  return send_locked({.command = Command::buffer_free, .fields = w.bytes(), .timeout = timeout}, kFlagNoReply,
                     next_request_id_++);
}

ConnectionStats Connection::stats() const {
  return {.live = !broken(),
          .bytes_sent = bytes_sent_.load(std::memory_order_relaxed),
          .bytes_received = bytes_received_.load(std::memory_order_relaxed),
          .requests = requests_.load(std::memory_order_relaxed),
          .round_trips = round_trips_.load(std::memory_order_relaxed),
          .resent = resent_.load(std::memory_order_relaxed),
          .last_round_trip_ns = last_round_trip_ns_.load(std::memory_order_relaxed)};
}

bool Connection::defunct() {
  if (broken()) return true;
  if (!mutex_.try_lock()) return false;
  // A run's reply on its way is not a hang-up.
  const bool unusable = unsettled_.empty() && !check_usable_locked(Command::ping, /*expect_silence=*/true).ok();
  mutex_.unlock();
  return unusable;
}

Status Connection::check_usable_locked(Command command, bool expect_silence) {
  if (broken())
    return fail(command, Status(broken_reason_.code(), "connection is broken: " + broken_reason_.message()));
  if (!expect_silence) return Status();
  // A one-way request would otherwise vanish into a socket whose peer is gone
  // (the kernel accepts the first send after a close); a poll costs far less
  // than the request. Between exchanges the server says nothing, so anything
  // readable means it hung up (or broke the protocol).
  // Keep-alives sent while this side was not waiting are read and dropped.
  for (;;) {
    if (!socket_.buffered()) {
      pollfd p{.fd = socket_.fd(), .events = POLLIN | POLLRDHUP, .revents = 0};
      if (::poll(&p, 1, 0) <= 0) return Status();
      if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
        return break_locked(command, io_error("connection closed by peer"));
    }
    auto header = receive_any_header_locked(command);
    if (!header.ok()) return header.status();
    if (header.value().command != Command::keepalive)
      return break_locked(command, protocol_error("server sent a frame nobody asked for"));
  }
}

Status Connection::send_locked(const Request& request, uint16_t flags, uint64_t id) {
  socket_.set_io_timeout(request.timeout);  // also bounds the reply that follows, if any
  const FrameHeader h = frame_header(request, flags, id);
  uint8_t header[kFrameHeaderSize];
  encode_header(h, header);

  iovec parts[4];
  size_t n = 0;
  if (!held_.empty()) parts[n++] = {held_.data(), held_.size()};  // sent first: they were asked for first
  parts[n++] = {header, kFrameHeaderSize};
  // iovec wants non-const pointers; sendmsg only reads through them.
  if (!request.fields.empty()) parts[n++] = {const_cast<uint8_t*>(request.fields.data()), request.fields.size()};
  if (!request.bulk.empty()) parts[n++] = {const_cast<uint8_t*>(request.bulk.data()), request.bulk.size()};
  const Status s = socket_.send_all(std::span<const iovec>(parts, n));
  if (!s.ok()) return break_locked(request.command, s);
  requests_.fetch_add(1 + held_requests_, std::memory_order_relaxed);
  bytes_sent_.fetch_add(held_.size() + kFrameHeaderSize + h.payload_length, std::memory_order_relaxed);
  held_.clear();
  held_requests_ = 0;
  return Status();
}

StatusOr<FrameHeader> Connection::receive_any_header_locked(Command command) {
  uint8_t raw[kFrameHeaderSize];
  const Status s = socket_.recv_all(raw, kFrameHeaderSize);
  if (!s.ok()) return break_locked(command, s);
  auto header = decode_header(std::span<const uint8_t, kFrameHeaderSize>(raw, kFrameHeaderSize));
  if (!header.ok()) return break_locked(command, header.status());
  bytes_received_.fetch_add(kFrameHeaderSize, std::memory_order_relaxed);
  const FrameHeader& h = header.value();
  if (h.command == Command::keepalive && (!(h.flags & kFlagReply) || h.payload_length != 0))
    return break_locked(command, protocol_error("a KEEPALIVE frame with a payload"));
  return header;
}

StatusOr<FrameHeader> Connection::receive_header_locked(Command command) {
  for (;;) {
    auto header = receive_any_header_locked(command);
    if (!header.ok() || header.value().command != Command::keepalive) return header;
  }
}

StatusOr<std::vector<uint8_t>> Connection::receive_reply_locked(Command command, uint64_t id,
                                                                std::span<uint8_t> bulk_in) {
  auto header = receive_header_locked(command);
  if (!header.ok()) return header.status();
  const FrameHeader& h = header.value();
  Status s;
  if (!(h.flags & kFlagReply) || h.command != command || h.request_id != id) {
    return break_locked(command, protocol_error(std::string("expected the reply to request ") + std::to_string(id) +
                                                ", got a frame of " + name_of(h.command) + " for request " +
                                                std::to_string(h.request_id)));
  }
  bytes_received_.fetch_add(h.payload_length, std::memory_order_relaxed);

  // The status: u32 code, string message.
  uint8_t status_head[8];
  if (h.payload_length < sizeof status_head) {
    return break_locked(command, protocol_error("reply of " + std::to_string(h.payload_length) +
                                                " bytes is too short to hold a status"));
  }
  s = socket_.recv_all(status_head, sizeof status_head);
  if (!s.ok()) return break_locked(command, s);
  const uint32_t code = read_u32(status_head);
  const uint32_t message_length = read_u32(status_head + 4);
  if (code > static_cast<uint32_t>(StatusCode::internal) || message_length > kMaxWireString ||
      message_length > h.payload_length - sizeof status_head) {
    return break_locked(command, protocol_error("reply has a malformed status (code " + std::to_string(code) +
                                                ", message of " + std::to_string(message_length) + " bytes)"));
  }
  std::string message(message_length, '\0');
  s = socket_.recv_all(message.data(), message.size());
  if (!s.ok()) return break_locked(command, s);
  const uint64_t rest = h.payload_length - sizeof status_head - message_length;

  if (code != 0) {
    if (rest != 0) return break_locked(command, protocol_error("error reply carries bytes after its status"));
    return fail(command, Status(static_cast<StatusCode>(code), std::move(message)));
  }
  if (rest < bulk_in.size() || rest - bulk_in.size() > kMaxReplyFields) {
    return break_locked(command,
                        protocol_error("reply of " + std::to_string(h.payload_length) + " bytes does not fit the " +
                                       std::to_string(bulk_in.size()) + " bytes of data expected"));
  }
  std::vector<uint8_t> fields(rest - bulk_in.size());
  s = socket_.recv_all(fields.data(), fields.size());
  if (s.ok()) s = socket_.recv_all(bulk_in.data(), bulk_in.size());
  if (!s.ok()) return break_locked(command, s);
  return fields;
}

Status Connection::fail(Command command, const Status& reason) const {
  return Status(reason.code(), std::string(name_of(command)) + " to " + endpoint_ + ": " + reason.message());
}

Status Connection::break_locked(Command command, const Status& reason) {
  held_.clear();  // they can no longer go out
  held_requests_ = 0;
  if (!broken()) {
    broken_reason_ = reason;
    broken_.store(true, std::memory_order_release);
    // Wakes nobody (we hold the only way in) but tells the server at once.
    socket_.shutdown();
  }
  return fail(command, reason);
}

// ---- connection caches ------------------------------------------------------

StatusOr<std::shared_ptr<Connection>> ConnectionCache::get(const std::string& endpoint,
                                                           const ClientCredentials& credentials,
                                                           std::chrono::milliseconds open_timeout) {
  auto parsed = parse_endpoint(endpoint);
  if (!parsed.ok()) return parsed.status();
  const std::string name = parsed.value().to_string();
  // Held while connecting, so that threads racing to the same endpoint share
  // one connection. Connecting to loopback or a LAN is quick; a server that
  // does not answer delays other first connections up to the connect timeout.
  MutexLock lock(mutex_);
  std::erase_if(by_endpoint_, [](const auto& entry) { return entry.second.connection.expired(); });
  if (auto it = by_endpoint_.find(name); it != by_endpoint_.end() && it->second.credentials == credentials) {
    // One whose server hung up (say, restarted) is replaced now, so the
    // caller's request goes to the server as it is.
    if (std::shared_ptr<Connection> live = it->second.connection.lock(); live && !live->defunct()) return live;
  }
  auto secret = client_key(credentials.key);
  if (!secret.ok()) return secret.status().with_context("cannot connect to " + name);
  auto tls = client_tls(credentials.tls);
  if (!tls.ok()) return tls.status().with_context("cannot connect to " + name);
  std::shared_ptr<const TlsContext> context;
  if (tls.value()) {
    auto made = TlsContext::for_client(*tls.value());
    if (!made.ok()) return made.status().with_context("cannot connect to " + name);
    context = std::move(made).value();
  }
  auto opened = Connection::open(parsed.value(), secret.value(), context.get(), open_timeout);
  if (!opened.ok()) return opened.status();
  by_endpoint_[name] = Entry{opened.value(), credentials};
  return opened;
}

std::shared_ptr<Connection> ConnectionCache::find_live(const std::string& endpoint) {
  auto parsed = parse_endpoint(endpoint);
  if (!parsed.ok()) return nullptr;
  MutexLock lock(mutex_);
  auto it = by_endpoint_.find(parsed.value().to_string());
  if (it == by_endpoint_.end()) return nullptr;
  std::shared_ptr<Connection> live = it->second.connection.lock();
  return live && !live->broken() ? live : nullptr;
}

namespace {

ConnectionCache& process_cache() {
  static ConnectionCache cache;
  return cache;
}

}  // namespace

StatusOr<std::shared_ptr<Connection>> get_connection(const std::string& endpoint, const ClientCredentials& credentials,
                                                     std::chrono::milliseconds open_timeout) {
  return process_cache().get(endpoint, credentials, open_timeout);
}

std::shared_ptr<Connection> find_live_connection(const std::string& endpoint) {
  return process_cache().find_live(endpoint);
}

}  // namespace tensorpc::rpc
