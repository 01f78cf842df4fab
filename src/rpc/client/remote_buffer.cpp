// RemoteBuffer: tensor bytes moved between the caller's memory and a
// server's buffer (the way through the weights cache: remote_buffer_cache.cpp).
#include "rpc/client/remote_buffer.h"

#include "rpc/client/remote_device.h"

namespace tensorpc::rpc {
namespace {

// A single SET_TENSOR frame stays within the server's default frame limit
// (1 GiB + 64); larger sets go as several frames.
constexpr uint64_t kMaxSetFrame = uint64_t{1} << 30;

template <typename Message>
std::vector<uint8_t> encoded(const Message& m) {
  WireWriter w;
  encode(w, m);
  return std::move(w.bytes());
}

}  // namespace

RemoteBuffer::RemoteBuffer(std::shared_ptr<const RemoteDeviceLink> device, std::shared_ptr<Connection> connection,
                           uint64_t handle, uint64_t size)
    : device_(std::move(device)), connection_(std::move(connection)), handle_(handle), size_(size) {}

RemoteBuffer::~RemoteBuffer() {
  // One-way, errors ignored: if it fails the connection is broken, and the
  // server frees everything a connection owns when it ends anyway.
  if (connection_->broken()) return;
  (void)connection_->free_buffer(handle_, device_->reply_timeout());
}

Device& RemoteBuffer::device() const { return device_->device(); }

Status RemoteBuffer::set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) {
  TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "set"));
  const auto* bytes = static_cast<const uint8_t*>(src);
  const uint64_t server_offset = t.offset + offset;
  if (size == 0) return Status();
  if (through_cache(t, size)) {
    const CachedRange range{.server_offset = server_offset, .src = bytes, .size = size};
    return set_cached(std::span<const CachedRange>(&range, 1));
  }
  if ((t.flags & kFlagInput) && size <= kHeldSetBytes) return send_set(server_offset, bytes, size, 0, /*later=*/true);
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(size - done, kMaxSetFrame);
    TENSORPC_RETURN_IF_ERROR(send_set(server_offset + done, bytes + done, n, 0));
    done += n;
  }
  return Status();
}

bool RemoteBuffer::through_cache(const Tensor& t, uint64_t size) const {
  // Inputs are set anew before every compute: hashing them buys nothing.
  return size >= device_->options().weights_cache_threshold && !(t.flags & kFlagInput);
}

Status RemoteBuffer::send_set(uint64_t server_offset, const uint8_t* src, uint64_t size, uint16_t flags, bool later) {
  const auto fields = encoded(SetTensorRequest{.handle = handle_, .offset = server_offset, .size = size});
  const Connection::Request request{.command = Command::set_tensor,
                                    .fields = fields,
                                    .bulk = std::span<const uint8_t>(src, size),
                                    .flags = flags,
                                    .timeout = device_->reply_timeout()};
  return later ? connection_->send_one_way_later(request) : connection_->send_one_way(request);
}

Status RemoteBuffer::get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const {
  return read(t, dst, offset, size, 0);
}

Status RemoteBuffer::get_after_pending(const Tensor& t, void* dst) const {
  return read(t, dst, 0, t.nbytes(), kFlagSync);
}

Status RemoteBuffer::get_after_pending(const Tensor& t, void* dst, const std::function<void()>& meanwhile) const {
  return read(t, dst, 0, t.nbytes(), kFlagSync, &meanwhile);
}

Status RemoteBuffer::read(const Tensor& t, void* dst, uint64_t offset, uint64_t size, uint16_t flags,
                          const std::function<void()>* meanwhile) const {
  TENSORPC_RETURN_IF_ERROR(check_range(t, offset, size, "get"));
  if (size == 0 && flags == 0) {
    if (meanwhile != nullptr) (*meanwhile)();
    return Status();
  }
  const auto fields = encoded(GetTensorRequest{.handle = handle_, .offset = t.offset + offset, .size = size});
  const Connection::Request request{
      .command = Command::get_tensor, .fields = fields, .flags = flags, .timeout = device_->reply_timeout()};
  const std::span<uint8_t> bulk(static_cast<uint8_t*>(dst), size);
  TENSORPC_ASSIGN_OR_RETURN(
      const std::vector<uint8_t> reply,
      meanwhile != nullptr ? connection_->call_meanwhile(request, bulk, *meanwhile) : connection_->call(request, bulk));
  if (!reply.empty()) {
    return Status(StatusCode::protocol_error,
                  "GET_TENSOR to " + connection_->endpoint() + ": reply has unexpected bytes before the data");
  }
  return Status();
}

Status RemoteBuffer::synchronize() {
  return connection_->call_status_only(Command::synchronize, {}, device_->reply_timeout());
}

Status RemoteBuffer::clear(uint8_t value) {
  return connection_->call(Command::buffer_clear, BufferClearRequest{.handle = handle_, .value = value},
                           device_->reply_timeout());
}

// Picks the path that keeps the bytes off this client: on the server when
// both buffers share the connection, server to server when the source is on
// another endpoint, a set when the source is in host memory.
Status RemoteBuffer::copy(const Tensor& src, const Tensor& dst) {
  TENSORPC_RETURN_IF_ERROR(check_range(dst, 0, dst.nbytes(), "copy"));
  if (src.nbytes() != dst.nbytes()) {
    return invalid_argument("copy: " + describe(src) + " and " + describe(dst) + " differ in size");
  }
  const auto* remote = dynamic_cast<const RemoteBuffer*>(src.buffer);
  if (remote != nullptr && remote->connection_ == connection_) {
    TENSORPC_RETURN_IF_ERROR(remote->check_range(src, 0, src.nbytes(), "copy"));
    const auto fields = encoded(CopyTensorRequest{.src_handle = remote->handle_,
                                                  .src_offset = src.offset,
                                                  .dst_handle = handle_,
                                                  .dst_offset = dst.offset,
                                                  .size = dst.nbytes()});
    return connection_->send_one_way(
        {.command = Command::copy_tensor, .fields = fields, .timeout = device_->reply_timeout()});
  }
  if (remote != nullptr) {
    TENSORPC_RETURN_IF_ERROR(remote->check_range(src, 0, src.nbytes(), "copy"));
    return copy_from_peer(*remote, src.offset, dst.offset, dst.nbytes());
  }
  if (src.data != nullptr) return set(dst, src.data, 0, dst.nbytes());
  return unsupported("copy: the source " + describe(src) + " is neither in host memory nor in a buffer of a " +
                     "tensorpc server");
}

Status RemoteBuffer::copy_from_peer(const RemoteBuffer& src, uint64_t src_offset, uint64_t dst_offset, uint64_t size) {
  const std::string route = "copy from " + src.connection_->endpoint() + " to " + connection_->endpoint() + ": ";
  // The grant is a round trip on this connection, so every write sent here
  // before it is done when the source's bytes arrive after it.
  GrantWriteReply grant;
  Status s =
      connection_->call(Command::grant_write, GrantWriteRequest{.handle = handle_, .offset = dst_offset, .size = size},
                        grant, device_->reply_timeout());
  if (!s.ok()) return Status(s.code(), route + s.message());
  s = src.connection_->call(Command::copy_to_peer,
                            CopyToPeerRequest{.src_handle = src.handle_,
                                              .src_offset = src_offset,
                                              .size = size,
                                              .endpoint = connection_->endpoint(),
                                              .token = grant.token},
                            src.device_->reply_timeout());
  if (!s.ok()) return Status(s.code(), route + s.message());
  return Status();
}

}  // namespace tensorpc::rpc
