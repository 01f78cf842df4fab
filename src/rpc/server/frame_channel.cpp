// FrameChannel: the socket and the framing of one session (frame_channel.h).
#include "rpc/server/frame_channel.h"

#include <algorithm>

#include "core/log.h"

namespace tensorpc::rpc {


namespace {
constexpr uint64_t kChunk = uint64_t{8} << 20;  // bytes received (and hashed) per step
constexpr const char* kNoReason = "connection closed by peer";
}  // namespace

FrameChannel::FrameChannel(Socket socket, std::string who, std::chrono::milliseconds io_timeout)
    : socket_(std::move(socket)), who_(std::move(who)), peer_(socket_.peer_name()) {
  // Bounds every wait inside a frame and on a reply, and before the
  // handshake is over the wait for the next frame; after it that wait is not
  // bounded (an idle client is fine; keepalive finds a dead one).
  socket_.set_io_timeout(io_timeout);
}

Status FrameChannel::start_tls(const TlsContext& ctx, std::chrono::milliseconds timeout) {
  const Status handshake = socket_.start_tls(ctx, peer_, timeout);
  if (!handshake.ok()) {
    end_reason_ = handshake.message();
    // The client may already be sending its first frame; let it read the alert first.
    MutexLock lock(socket_mutex_);
    socket_.close_after_draining(std::chrono::milliseconds(200));
  }
  return handshake;
}

void FrameChannel::shutdown() {
  MutexLock lock(socket_mutex_);
  socket_.shutdown();
}

void FrameChannel::close() {
  if (!held_.empty()) (void)flush_held();  // best effort: the client may still read them
  MutexLock lock(socket_mutex_);
  socket_.close();
}

void FrameChannel::end(std::string reason) {
  closing_ = true;
  end_reason_ = std::move(reason);
}

void FrameChannel::explain_end(const std::string& reason) {
  if (closing_ && end_reason_ == kNoReason) end_reason_ = reason;
}

bool FrameChannel::next_frame(bool may_idle) {
  if (!held_.empty() && !socket_.readable_now() && !flush_held()) return false;
  uint8_t raw[kFrameHeaderSize];
  Status s = may_idle ? socket_.wait_readable() : Status();
  if (s.ok()) s = socket_.recv_all(raw, sizeof raw);
  if (!s.ok()) {
    end_reason_ = s.message();
    return false;
  }
  auto header = decode_header(std::span<const uint8_t, kFrameHeaderSize>(raw, kFrameHeaderSize));
  if (!header.ok()) {
    end_reason_ = header.status().message();
    log::warn(who_ + ": " + end_reason_ + "; closing");
    return false;
  }
  current_ = header.value();
  // Nothing to ride with: what it does may take long.
  if ((current_.flags & kFlagNoReply) != 0 && !held_.empty()) return flush_held();
  return true;
}

namespace {

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void FrameChannel::lend_socket() {
  lent_since_ns_.store(ns_of(std::chrono::steady_clock::now()), std::memory_order_release);
  io_mutex_.unlock();
}

void FrameChannel::take_socket_back() {
  io_mutex_.lock();
  lent_since_ns_.store(0, std::memory_order_relaxed);
}

void FrameChannel::sent_now() {
  last_sent_ns_.store(ns_of(std::chrono::steady_clock::now()), std::memory_order_relaxed);
}

void FrameChannel::keep_alive(std::chrono::steady_clock::time_point now) {
  if (!keepalives_.load(std::memory_order_acquire)) return;
  const int64_t interval = std::chrono::duration_cast<std::chrono::nanoseconds>(kKeepAliveInterval).count();
  const int64_t since = std::max(lent_since_ns_.load(std::memory_order_acquire), last_sent_ns_.load());
  if (lent_since_ns_.load(std::memory_order_acquire) == 0 || ns_of(now) - since < interval) return;
  std::unique_lock<std::mutex> lock(io_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || lent_since_ns_.load(std::memory_order_acquire) == 0) return;
  FrameHeader h;
  h.command = Command::keepalive;
  h.flags = kFlagReply;
  uint8_t raw[kFrameHeaderSize];
  encode_header(h, raw);
  // A failure shows in the session's own next read or write.
  if (socket_.send_all(raw, sizeof raw).ok()) sent_now();
}

Status FrameChannel::reply_early() {
  replied_early_ = true;
  std::lock_guard<std::mutex> lock(io_mutex_);  // lent while the handler works
  const Status s = send_reply(Status(), FrameReply{});
  if (!s.ok()) end(s.message());
  return s;
}

bool FrameChannel::flush_held() {
  const Status s = socket_.send_all(held_.data(), held_.size());
  held_.clear();
  if (!s.ok()) end_reason_ = s.message();
  sent_now();
  return s.ok();
}

// Grows the payload as bytes arrive, so a frame that only claims to be large
// costs no memory before its bytes come.
Status FrameChannel::read_payload() {
  const uint64_t length = current_.payload_length;
  payload_.clear();
  while (payload_.size() < length) {
    const size_t have = payload_.size();
    const size_t step = static_cast<size_t>(std::min<uint64_t>(length - have, std::max<size_t>(have, 64 << 10)));
    payload_.resize(have + step);
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(payload_.data() + have, step));
  }
  return Status();
}

void FrameChannel::end_frame() {
  replied_early_ = false;
  // A huge graph frame should not pin its memory for the connection's life.
  if (payload_.capacity() > (uint64_t{16} << 20)) std::vector<uint8_t>().swap(payload_);
}

Status FrameChannel::fail_draining(uint64_t n, Status why) {
  Status d = drain(n);
  if (!d.ok()) end(d.message());
  return why;
}

Status FrameChannel::drain(uint64_t length) {
  std::vector<uint8_t> scratch(static_cast<size_t>(std::min<uint64_t>(length, 64 << 10)));
  while (length > 0) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(length, scratch.size()));
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(scratch.data(), step));
    length -= step;
  }
  return Status();
}

Status FrameChannel::receive(uint8_t* dst, uint64_t size, Sha256Hasher* hasher) {
  for (uint64_t done = 0; done < size;) {
    const size_t step = static_cast<size_t>(std::min(size - done, kChunk));
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(dst + done, step));
    if (hasher) hasher->update(dst + done, step);
    done += step;
  }
  return Status();
}

Status FrameChannel::send_reply(const Status& status, const FrameReply& reply) {
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
  const size_t size = sizeof raw + head.size() + fields_size + bulk.size();
  if (bulk.empty() && held_.size() + size <= kMaxHeldBytes && socket_.readable_now()) {
    held_.insert(held_.end(), raw, raw + sizeof raw);
    held_.insert(held_.end(), head.bytes().begin(), head.bytes().end());
    held_.insert(held_.end(), fields.begin(), fields.begin() + static_cast<ptrdiff_t>(fields_size));
    return Status();
  }
  const iovec parts[5] = {
      {held_.data(), held_.size()},
      {raw, sizeof raw},
      {head.bytes().data(), head.size()},
      {const_cast<uint8_t*>(fields.data()), fields_size},
      {const_cast<uint8_t*>(bulk.data()), bulk.size()},
  };
  const Status s = socket_.send_all(parts);
  held_.clear();
  sent_now();
  return s;
}

template <typename Request>
Status FrameChannel::read_streamed_fields(const char* command, size_t fixed_size, Request& req) {
  const uint64_t length = current_.payload_length;
  if (length < fixed_size) {
    return fail_draining(length, protocol_error(std::string(command) + " request: payload of " +
                                                std::to_string(length) + " bytes is shorter than its fixed fields"));
  }
  uint8_t fixed[64];
  if (fixed_size > sizeof fixed) return internal_error(std::string(command) + ": fixed fields too long");
  Status s = socket_.recv_all(fixed, fixed_size);
  if (!s.ok()) {
    end(s.message());
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

template Status FrameChannel::read_streamed_fields(const char*, size_t, SetTensorRequest&);
template Status FrameChannel::read_streamed_fields(const char*, size_t, WriteGrantedRequest&);

}  // namespace tensorpc::rpc
