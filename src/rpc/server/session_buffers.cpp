// SessionBuffers: one session's buffer table, limits and streams
// (session_buffers.h).
#include "rpc/server/session_buffers.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#include "tensorpc/op.h"

namespace tensorpc::rpc {
namespace {

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

}  // namespace

SessionBuffers::SessionBuffers(const SessionEnv& env) : env_(env) { streams_.resize(env_.devices.size()); }

Status SessionBuffers::check_device(uint32_t device) const {
  if (device >= env_.devices.size()) {
    return invalid_argument("device index " + std::to_string(device) + " out of range: this server has " +
                            std::to_string(env_.devices.size()) + " device(s)");
  }
  return Status();
}

Status SessionBuffers::check_limits(uint64_t size) const {
  size_t live = 0;
  {
    MutexLock lock(table_->mutex);
    live = table_->entries.size();
  }
  if (env_.max_session_buffers != 0 && live >= env_.max_session_buffers) {
    return out_of_memory("this connection already holds " + std::to_string(live) +
                         " buffers, the most one client may hold (the server's --client-buffers " +
                         std::to_string(env_.max_session_buffers) + "); free some first");
  }
  const uint64_t limit = env_.max_session_memory;
  if (limit == 0) return Status();
  const std::string named =
      "the client memory quota of " + std::to_string(limit) + " bytes (the server's --client-memory)";
  if (size > limit) return out_of_memory("a buffer of " + std::to_string(size) + " bytes exceeds " + named);
  // held_bytes_ never exceeds the limit, so held_bytes_ + size cannot overflow.
  if (held_bytes_ + size > limit) {
    return out_of_memory("allocating " + std::to_string(size) + " bytes would bring this connection's buffers to " +
                         std::to_string(held_bytes_ + size) + " bytes, over " + named + "; free some first");
  }
  return Status();
}

StatusOr<uint64_t> SessionBuffers::allocate(uint32_t device, uint64_t size) {
  // Checked before the device is asked, so a refused request costs no memory.
  TENSORPC_RETURN_IF_ERROR(check_limits(size));
  Device& dev = *env_.devices[device];
  if (size > dev.max_allocation()) {
    return out_of_memory(dev.name() + ": " + std::to_string(size) + " bytes exceed the largest allocation of " +
                         std::to_string(dev.max_allocation()));
  }
  TENSORPC_ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer, dev.allocate(size));
  const uint64_t handle = next_handle_++;
  const uint64_t allocated = buffer->size();
  auto entry = std::make_shared<BufferEntry>(BufferEntry{std::move(buffer), device});
  {
    MutexLock lock(table_->mutex);
    table_->entries.emplace(handle, std::move(entry));
  }
  largest_buffer_ = std::max(largest_buffer_, allocated);
  held_bytes_ += allocated;
  env_.counters->live_buffers += 1;
  env_.counters->buffer_bytes += allocated;
  return handle;
}

void SessionBuffers::free(uint64_t handle) {
  std::shared_ptr<BufferEntry> freed;  // destroyed after the lock is released
  MutexLock lock(table_->mutex);
  auto it = table_->entries.find(handle);
  const uint64_t size = it->second->buffer->size();
  held_bytes_ -= size;
  env_.counters->live_buffers -= 1;
  env_.counters->buffer_bytes -= size;
  freed = std::move(it->second);
  table_->entries.erase(it);
}

StatusOr<BufferEntry*> SessionBuffers::find(uint64_t handle) {
  MutexLock lock(table_->mutex);
  auto it = table_->entries.find(handle);
  if (it == table_->entries.end()) {
    return not_found("buffer handle " + std::to_string(handle) +
                     " not found (never issued on this connection, or freed)");
  }
  return it->second.get();
}

StatusOr<BufferEntry*> SessionBuffers::find_range(uint64_t handle, uint64_t offset, uint64_t size, const char* what) {
  TENSORPC_ASSIGN_OR_RETURN(auto* entry, find(handle));
  const uint64_t buffer_size = entry->buffer->size();
  // Written so that nothing overflows: offset + size is never computed.
  if (offset > buffer_size || size > buffer_size - offset) {
    return invalid_argument(std::string(what) + " bytes [" + std::to_string(offset) + ", +" + std::to_string(size) +
                            ") lie outside buffer " + std::to_string(handle) + " of " + std::to_string(buffer_size) +
                            " bytes");
  }
  return entry;
}

SessionBuffers::Held SessionBuffers::held() const {
  Held held;
  MutexLock lock(table_->mutex);
  held.buffers = table_->entries.size();
  for (const auto& [handle, entry] : table_->entries) held.bytes += entry->buffer->size();
  return held;
}

Status SessionBuffers::copy_range(uint64_t src_handle, uint64_t src_offset, uint64_t dst_handle, uint64_t dst_offset,
                                  uint64_t size) {
  TENSORPC_ASSIGN_OR_RETURN(auto* src, find_range(src_handle, src_offset, size, "COPY_TENSOR: source"));
  TENSORPC_ASSIGN_OR_RETURN(auto* dst, find_range(dst_handle, dst_offset, size, "COPY_TENSOR: destination"));
  if (size == 0) return Status();
  Buffer& from = *src->buffer;
  Buffer& to = *dst->buffer;
  if (from.host_base() != nullptr && to.host_base() != nullptr) {
    // memmove: source and destination may overlap within one buffer.
    std::memmove(static_cast<uint8_t*>(to.host_base()) + dst_offset,
                 static_cast<const uint8_t*>(from.host_base()) + src_offset, size);
    return Status();
  }
  auto from_t = byte_span(from, src_offset, size);
  auto to_t = byte_span(to, dst_offset, size);
  if (from_t.ok() && to_t.ok()) {
    Status s = to.copy(from_t.value(), to_t.value());
    if (s.code() != StatusCode::unsupported) return s;
  }
  // The devices cannot reach each other: through host memory, on the server.
  std::vector<uint8_t> staging(size);
  TENSORPC_RETURN_IF_ERROR(read_bytes(*src, src_offset, staging.data(), size));
  return write_bytes(*dst, dst_offset, staging.data(), size);
}

StatusOr<Stream*> SessionBuffers::stream_of(uint32_t device) {
  if (!streams_[device]) {
    TENSORPC_ASSIGN_OR_RETURN(streams_[device], env_.devices[device]->create_stream());
  }
  return streams_[device].get();
}

ResolveHandle SessionBuffers::resolver(uint32_t device, std::vector<uint64_t>& used) {
  return [this, device, &used](uint64_t handle) -> StatusOr<Buffer*> {
    auto entry = find(handle);
    if (!entry.ok()) return not_found("not found (never issued on this connection, or freed)");
    if (entry.value()->device != device) {
      return invalid_argument("lives on device " + std::to_string(entry.value()->device) + ", not on device " +
                              std::to_string(device) + " of this graph");
    }
    used.push_back(handle);
    return entry.value()->buffer.get();
  };
}

Status SessionBuffers::compute_on(uint32_t device, Graph& graph) {
  Device& dev = *env_.devices[device];
  for (const Tensor* node : graph.nodes()) {
    if (!dev.supports(*node)) {
      return unsupported(std::string(name_of(node->op)) + " on " + describe(*node) + " is not supported by " +
                         dev.name());
    }
  }
  TENSORPC_ASSIGN_OR_RETURN(auto* stream, stream_of(device));
  const ElapsedInto timed(env_.counters->compute_ns);
  return stream->compute(graph);
}

Status SessionBuffers::synchronize() {
  Status first;
  for (auto& stream : streams_) {
    if (!stream) continue;
    Status s = stream->synchronize();
    if (first.ok()) first = s;
  }
  return first;
}

void SessionBuffers::release_all(uint64_t session) {
  streams_.clear();
  // No grant of this session may be used from here on: revoked, and the
  // table closed for any write that took its grant a moment ago.
  if (env_.grants != nullptr) env_.grants->revoke_session(session);
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
}

Status write_bytes(BufferEntry& entry, uint64_t offset, const uint8_t* src, uint64_t size) {
  if (size == 0) return Status();
  Buffer& buf = *entry.buffer;
  if (void* base = buf.host_base()) {
    std::memcpy(static_cast<uint8_t*>(base) + offset, src, size);
    return Status();
  }
  TENSORPC_ASSIGN_OR_RETURN(const Tensor t, byte_span(buf, offset, size));
  return buf.set(t, src, 0, size);
}

Status read_bytes(BufferEntry& entry, uint64_t offset, uint8_t* dst, uint64_t size) {
  if (size == 0) return Status();
  Buffer& buf = *entry.buffer;
  if (void* base = buf.host_base()) {
    std::memcpy(dst, static_cast<const uint8_t*>(base) + offset, size);
    return Status();
  }
  TENSORPC_ASSIGN_OR_RETURN(const Tensor t, byte_span(buf, offset, size));
  return buf.get(t, dst, 0, size);
}

}  // namespace tensorpc::rpc
