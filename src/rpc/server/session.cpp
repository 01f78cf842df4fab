// Session: one connection's frame loop and command handlers (session.h).
//
// The loop reads a header, enforces the frame rules (magic, command, payload
// limit, HELLO first, then AUTH when the server has a key), reads the payload
// (except SET_TENSOR, which streams its bytes straight into the buffer) and
// calls the command's handler through kCommands. A handler returns a Status
// and fills a Reply; the loop turns both into one reply frame, or — for
// NO_REPLY frames — keeps the first error for the next SYNCHRONIZE.
#include "rpc/server/session.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/log.h"
#include "tensorpc/op.h"

namespace tensorpc::rpc {

Status protocol_error(std::string msg) { return {StatusCode::protocol_error, std::move(msg)}; }

// A descriptor naming `size` bytes at `offset` of buf, for the Buffer calls
// that take a tensor when the bytes are not host-addressable: rows of one f16
// element placed one byte apart span exactly `size` bytes. Host-addressable
// buffers (every CPU buffer) never need it.
StatusOr<Tensor> byte_span(Buffer& buf, uint64_t offset, uint64_t size) {
  if (size < 2) return unsupported("ranges of fewer than 2 bytes on a device without host memory");
  Tensor t;
  t.type = DType::f16;
  t.ne = {1, static_cast<int64_t>(size - 1), 1, 1};
  t.nb = {2, 1, size, size};
  t.buffer = &buf;
  t.offset = offset;
  return t;
}

namespace {
constexpr uint64_t kChunk = uint64_t{8} << 20;  // bytes received (and hashed) per step

// A one-way computation: skipped while an earlier one-way command's error is pending.
bool skips_after_failure(const FrameHeader& h) {
  if ((h.flags & kFlagNoReply) == 0) return false;
  return h.command == Command::graph_compute || h.command == Command::graph_recompute ||
         h.command == Command::plan_run;
}
}  // namespace

Session::Session(Socket socket, const SessionEnv& env, uint64_t id)
    : socket_(std::move(socket)), env_(env), id_(id), peer_(socket_.peer_name()) {
  streams_.resize(env_.devices.size());
  // Bounds every wait inside a frame and on a reply, and before the
  // handshake is over the wait for the next frame; after it that wait is not
  // bounded (an idle client is fine; keepalive finds a dead one).
  socket_.set_io_timeout(env_.io_timeout);
}

Session::~Session() { release_all(); }

void Session::run() {
  log::info("session " + std::to_string(id_) + ": " + peer_ + " connected");
  try {
    // Bounded like a frame: a client that connects and says nothing (or not
    // TLS) is let go after the I/O timeout.
    const Status handshake = env_.tls ? socket_.start_tls(*env_.tls, peer_, env_.io_timeout) : Status();
    if (!handshake.ok()) {
      end_reason_ = handshake.message();
      // The client may already be sending its first frame; let it read the alert first.
      std::lock_guard<std::mutex> lock(socket_mutex_);
      socket_.close_after_draining(std::chrono::milliseconds(200));
    }
    while (handshake.ok() && serve_frame()) {
    }
  } catch (const std::exception& e) {
    // Handlers turn their own failures into replies; this is the last guard
    // that keeps one connection's failure from ending the process.
    end_reason_ = std::string("internal error: ") + e.what();
    log::error("session " + std::to_string(id_) + ": " + end_reason_);
  }
  size_t n = 0;
  uint64_t bytes = 0;
  {
    MutexLock lock(table_->mutex);
    n = table_->entries.size();
    for (const auto& [handle, entry] : table_->entries) bytes += entry->buffer->size();
  }
  release_all();
  {
    std::lock_guard<std::mutex> lock(socket_mutex_);
    socket_.close();
  }
  log::info("session " + std::to_string(id_) + ": " + peer_ + " ended (" + end_reason_ + "); freed " +
            std::to_string(n) + " buffers, " + std::to_string(bytes) + " bytes");
}

void Session::shutdown() {
  stopping_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(socket_mutex_);
  socket_.shutdown();
}

void Session::release_all() {
  graphs_.clear();  // they point into the buffers
  plans_.clear();
  streams_.clear();
  // No grant of this session may be used from here on: revoked, and the
  // table closed for any write that took its grant a moment ago.
  if (env_.grants != nullptr) env_.grants->revoke_session(id_);
  std::unordered_map<uint64_t, std::shared_ptr<BufferEntry>> entries;
  {
    MutexLock lock(table_->mutex);
    table_->open = false;
    entries.swap(table_->entries);
  }
  for (const auto& [handle, entry] : entries) {
    env_.counters->live_buffers -= 1;
    env_.counters->buffer_bytes -= entry->buffer->size();
  }
  held_bytes_ = 0;
  // Freed outside the lock; a granted write still running holds its own
  // reference and frees its buffer when done.
  entries.clear();
  peers_.clear();
}

// ---- the frame loop -------------------------------------------------------------

bool Session::serve_frame() {
  uint8_t raw[kFrameHeaderSize];
  // An admitted client may idle between frames for as long as it likes; a
  // connection still in its handshake gets the I/O timeout for its next
  // frame too, so connections that never say HELLO (or AUTH) cannot pile up.
  Status s = phase_ == Phase::serving ? socket_.wait_readable() : Status();
  if (s.ok()) s = socket_.recv_all(raw, sizeof raw);
  if (!s.ok()) {
    end_reason_ = s.message();
    return false;
  }
  auto header = decode_header(std::span<const uint8_t, kFrameHeaderSize>(raw, kFrameHeaderSize));
  if (!header.ok()) {
    end_reason_ = header.status().message();
    log::warn("session " + std::to_string(id_) + ": " + end_reason_ + "; closing");
    return false;
  }
  current_ = header.value();
  const Command command = current_.command;
  const char* name = name_of(command);
  if (current_.payload_length > payload_limit(command)) {
    end_reason_ = std::string(name) + " frame of " + std::to_string(current_.payload_length) +
                  " bytes is over the limit of " + std::to_string(payload_limit(command));
    log::warn("session " + std::to_string(id_) + ": " + end_reason_ + "; closing");
    return false;
  }
  const CommandSpec& spec = kCommands[static_cast<uint16_t>(command)];
  if (!spec.streams_payload) {
    s = read_payload(current_.payload_length);
    if (!s.ok()) {
      end_reason_ = s.message();
      return false;
    }
  }
  Reply reply;
  Status result = admit(command);
  if (!result.ok()) {
    closing_ = true;
    end_reason_ = result.message();
    // A streamed payload is still unread. It is small before the handshake
    // (payload_limit), so it is taken, lest closing on it reset the
    // connection before the refusal is read.
    if (spec.streams_payload) (void)drain(current_.payload_length);
    if (phase_ == Phase::awaiting_auth) {
      log::warn("session " + std::to_string(id_) + ": " + peer_ + ": " + end_reason_ + "; closing");
    }
  } else if (!pending_.ok() && ((current_.flags & kFlagSync) != 0 || skips_after_failure(current_))) {
    // SYNC: the pending error is the reply, and the command does not run.
    // Without SYNC, a one-way computation after a failed one-way command
    // does not run either: its inputs may be what failed, and a result
    // computed from them must not pass for a good one (the pending error
    // stands until SYNCHRONIZE).
    if ((current_.flags & kFlagSync) != 0) {
      result = pending_;
      pending_ = Status();
    }
    if (spec.streams_payload) {
      s = drain(current_.payload_length);
      if (!s.ok()) {
        end_reason_ = s.message();
        return false;
      }
    }
  } else {
    WireReader in(payload_);
    bool threw = true;
    try {
      result = (this->*spec.handler)(in, reply);
      threw = false;
    } catch (const std::bad_alloc&) {
      result = out_of_memory("the server ran out of host memory serving this request");
    } catch (const Error& e) {
      result = e.status();
    } catch (const std::exception& e) {
      result = internal_error(e.what());
    }
    // A streaming handler that threw may have left its payload half read.
    if (threw && spec.streams_payload) closing_ = true;
    // A failed handshake ends the connection: nothing else may follow it.
    if (!result.ok() && (command == Command::hello || command == Command::auth)) closing_ = true;
    if (!result.ok() && result.message().rfind(name, 0) != 0) result = result.with_context(name);
  }
  if (!result.ok()) {
    log::debug("session " + std::to_string(id_) + ": " + result.to_string());
    if (closing_ && end_reason_ == "connection closed by peer") end_reason_ = result.message();
  }
  if ((current_.flags & kFlagNoReply) != 0 && !closing_) {
    if (!result.ok() && pending_.ok()) pending_ = result;
  } else {
    // A reply that carries a buffer's bytes must be ordered before a granted
    // write into that buffer which the reply leads to (the client's next
    // step may have another server write there); the writing session looks
    // the buffer up under the table's lock, so the send holds it. (Taking it
    // after the send would do for the kernel, which has copied the bytes by
    // then, but not for a race detector that records the read when the call
    // returns: one rule for every build.)
    if (!reply.bulk.empty()) {
      MutexLock lock(table_->mutex);
      s = send_reply(result, reply);
    } else {
      s = send_reply(result, reply);
    }
    if (!s.ok()) {
      end_reason_ = s.message();
      return false;
    }
  }
  // A huge graph frame should not pin its memory for the connection's life.
  if (payload_.capacity() > (uint64_t{16} << 20)) std::vector<uint8_t>().swap(payload_);
  return !closing_;
}

uint64_t Session::payload_limit(Command command) const {
  // Before the handshake is over only HELLO and AUTH are served, and both are
  // small: a peer not yet admitted cannot make the server read a large frame.
  if (phase_ != Phase::serving) return kMaxHelloRequestSize;
  if (command == Command::set_tensor) return std::max(env_.max_frame, largest_buffer_ + kSetTensorFixedSize);
  // A granted write is as large as the grant, whoever's buffer it names.
  if (command == Command::write_granted && env_.grants != nullptr) {
    return std::max(env_.max_frame, env_.grants->largest_size() + kWriteGrantedFixedSize);
  }
  return env_.max_frame;
}

// Grows the payload as bytes arrive, so a frame that only claims to be large
// costs no memory before its bytes come.
Status Session::read_payload(uint64_t length) {
  payload_.clear();
  while (payload_.size() < length) {
    const size_t have = payload_.size();
    const size_t step = static_cast<size_t>(std::min<uint64_t>(length - have, std::max<size_t>(have, 64 << 10)));
    payload_.resize(have + step);
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(payload_.data() + have, step));
  }
  return Status();
}

Status Session::fail_draining(uint64_t n, Status why) {
  Status d = drain(n);
  if (!d.ok()) {
    closing_ = true;
    end_reason_ = d.message();
  }
  return why;
}

Status Session::drain(uint64_t length) {
  std::vector<uint8_t> scratch(static_cast<size_t>(std::min<uint64_t>(length, 64 << 10)));
  while (length > 0) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(length, scratch.size()));
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(scratch.data(), step));
    length -= step;
  }
  return Status();
}

Status Session::send_reply(const Status& status, Reply& reply) {
  WireWriter head;
  encode_status(head, status);
  const std::vector<uint8_t>& fields = reply.fields.bytes();
  const std::span<const uint8_t> bulk = status.ok() ? reply.bulk : std::span<const uint8_t>();
  const uint64_t fields_size = status.ok() ? fields.size() : 0;
  FrameHeader h;
  h.command = current_.command;
  h.flags = kFlagReply;
  h.request_id = current_.request_id;
  h.payload_length = head.size() + fields_size + bulk.size();
  uint8_t raw[kFrameHeaderSize];
  encode_header(h, raw);
  const iovec parts[4] = {
      {raw, sizeof raw},
      {head.bytes().data(), head.size()},
      {const_cast<uint8_t*>(fields.data()), fields_size},
      {const_cast<uint8_t*>(bulk.data()), bulk.size()},
  };
  return socket_.send_all(parts);
}

// ---- shared checks ------------------------------------------------------------------

StatusOr<BufferEntry*> Session::find_buffer(uint64_t handle) {
  MutexLock lock(table_->mutex);
  auto it = table_->entries.find(handle);
  if (it == table_->entries.end()) {
    return not_found("buffer handle " + std::to_string(handle) +
                     " not found (never issued on this connection, or freed)");
  }
  return it->second.get();
}

StatusOr<BufferEntry*> Session::find_range(uint64_t handle, uint64_t offset, uint64_t size, const char* what) {
  auto entry = find_buffer(handle);
  if (!entry.ok()) return entry.status();
  const uint64_t buffer_size = entry.value()->buffer->size();
  // Written so that nothing overflows: offset + size is never computed.
  if (offset > buffer_size || size > buffer_size - offset) {
    return invalid_argument(std::string(what) + " bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
                            ") lie outside buffer " + std::to_string(handle) + " of " + std::to_string(buffer_size) +
                            " bytes");
  }
  return entry;
}

Status Session::check_device(uint32_t device) const {
  if (device >= env_.devices.size()) {
    return invalid_argument("device index " + std::to_string(device) + " out of range: this server has " +
                            std::to_string(env_.devices.size()) + " device(s)");
  }
  return Status();
}

Status Session::check_session_limits(uint64_t size) const {
  size_t live = 0;
  {
    MutexLock lock(table_->mutex);
    live = table_->entries.size();
  }
  if (env_.max_session_buffers != 0 && live >= env_.max_session_buffers) {
    return out_of_memory("this connection already holds " + std::to_string(live) +
                         " buffers, the most one session may hold (the server's --max-session-buffers " +
                         std::to_string(env_.max_session_buffers) + "); free some first");
  }
  const uint64_t limit = env_.max_session_memory;
  if (limit == 0) return Status();
  const std::string named =
      "the session memory limit of " + std::to_string(limit) + " bytes (the server's --max-session-memory)";
  if (size > limit) return out_of_memory("a buffer of " + std::to_string(size) + " bytes exceeds " + named);
  // held_bytes_ never exceeds the limit, so held_bytes_ + size cannot overflow.
  if (held_bytes_ + size > limit) {
    return out_of_memory("allocating " + std::to_string(size) + " bytes would bring this connection's buffers to " +
                         std::to_string(held_bytes_ + size) + " bytes, over " + named + "; free some first");
  }
  return Status();
}

Status Session::write_bytes(BufferEntry& entry, uint64_t offset, const uint8_t* src, uint64_t size) {
  if (size == 0) return Status();
  Buffer& buf = *entry.buffer;
  if (void* base = buf.host_base()) {
    std::memcpy(static_cast<uint8_t*>(base) + offset, src, size);
    return Status();
  }
  auto t = byte_span(buf, offset, size);
  if (!t.ok()) return t.status();
  return buf.set(t.value(), src, 0, size);
}

Status Session::read_bytes(BufferEntry& entry, uint64_t offset, uint8_t* dst, uint64_t size) {
  if (size == 0) return Status();
  Buffer& buf = *entry.buffer;
  if (void* base = buf.host_base()) {
    std::memcpy(dst, static_cast<const uint8_t*>(base) + offset, size);
    return Status();
  }
  auto t = byte_span(buf, offset, size);
  if (!t.ok()) return t.status();
  return buf.get(t.value(), dst, 0, size);
}

// Receives `size` payload bytes straight into the buffer (host memory), or
// through one staging vector when the device has none.
Status Session::receive_into(BufferEntry& entry, uint64_t offset, uint64_t size, Sha256Hasher* hasher) {
  uint8_t* dst = static_cast<uint8_t*>(entry.buffer->host_base());
  std::vector<uint8_t> staging;
  if (dst == nullptr) {
    staging.resize(size);
    dst = staging.data();
  } else {
    dst += offset;
  }
  for (uint64_t done = 0; done < size;) {
    const size_t step = static_cast<size_t>(std::min(size - done, kChunk));
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(dst + done, step));
    if (hasher) hasher->update(dst + done, step);
    done += step;
  }
  if (!staging.empty()) return write_bytes(entry, offset, staging.data(), size);
  return Status();
}

StatusOr<Stream*> Session::stream_of(uint32_t device) {
  if (!streams_[device]) {
    auto s = env_.devices[device]->create_stream();
    if (!s.ok()) return s.status();
    streams_[device] = std::move(s).value();
  }
  return streams_[device].get();
}

Status Session::run_graph(StoredGraph& g) { return compute_on(g.device, g.graph.graph); }

Status Session::compute_on(uint32_t device, Graph& graph) {
  Device& dev = *env_.devices[device];
  for (const Tensor* node : graph.nodes()) {
    if (!dev.supports(*node)) {
      return unsupported(std::string(name_of(node->op)) + " on " + describe(*node) + " is not supported by " +
                         dev.name());
    }
  }
  auto stream = stream_of(device);
  if (!stream.ok()) return stream.status();
  const ElapsedInto timed(env_.counters->compute_ns);
  return stream.value()->compute(graph);
}

template <typename Request>
Status Session::read_streamed_fields(const char* command, size_t fixed_size, Request& req) {
  const uint64_t length = current_.payload_length;
  if (length < fixed_size) {
    return fail_draining(length, protocol_error(std::string(command) + " request: payload of " +
                                                std::to_string(length) + " bytes is shorter than its fixed fields"));
  }
  uint8_t fixed[64];
  if (fixed_size > sizeof fixed) return internal_error(std::string(command) + ": fixed fields too long");
  Status s = socket_.recv_all(fixed, fixed_size);
  if (!s.ok()) {
    closing_ = true;
    end_reason_ = s.message();
    return s;
  }
  WireReader r(std::span<const uint8_t>(fixed, fixed_size));
  TENSORPC_RETURN_IF_ERROR(decode(r, req));
  const uint64_t data = length - fixed_size;
  if (req.size != data) {
    return fail_draining(data, invalid_argument(std::string(command) + ": size " + std::to_string(req.size) + " but " +
                                                std::to_string(data) + " bytes of data follow"));
  }
  return Status();
}

template Status Session::read_streamed_fields(const char*, size_t, SetTensorRequest&);
template Status Session::read_streamed_fields(const char*, size_t, WriteGrantedRequest&);

}  // namespace tensorpc::rpc
