// Session's command handlers, one small function per command, and the
// table the frame loop (session.cpp) dispatches through.
#include <algorithm>
#include <cstring>
#include <optional>

#include "rpc/server/session.h"
#include "tensorpc/op.h"

namespace tensorpc::rpc {

const Session::CommandSpec Session::kCommands[kCommandCount] = {
    {&Session::on_hello, false},              // HELLO (session_handshake.cpp)
    {&Session::on_list_devices, false},       // LIST_DEVICES
    {&Session::on_device_memory, false},      // DEVICE_MEMORY
    {&Session::on_buffer_alloc, false},       // BUFFER_ALLOC
    {&Session::on_buffer_free, false},        // BUFFER_FREE
    {&Session::on_buffer_clear, false},       // BUFFER_CLEAR
    {&Session::on_set_tensor, true},          // SET_TENSOR
    {&Session::on_set_tensor_hash, false},    // SET_TENSOR_HASH (session_cache.cpp)
    {&Session::on_get_tensor, false},         // GET_TENSOR
    {&Session::on_copy_tensor, false},        // COPY_TENSOR
    {&Session::on_graph_compute, false},      // GRAPH_COMPUTE
    {&Session::on_graph_recompute, false},    // GRAPH_RECOMPUTE
    {&Session::on_synchronize, false},        // SYNCHRONIZE
    {&Session::on_ping, false},               // PING
    {&Session::on_grant_write, false},        // GRANT_WRITE
    {&Session::on_copy_to_peer, false},       // COPY_TO_PEER
    {&Session::on_write_granted, true},       // WRITE_GRANTED
    {&Session::on_plan_store, false},         // PLAN_STORE
    {&Session::on_plan_run, false},           // PLAN_RUN
    {&Session::on_grant_standing, false},     // GRANT_STANDING
    {&Session::on_auth, false},               // AUTH (session_handshake.cpp)
    {&Session::on_set_tensor_hashes, false},  // SET_TENSOR_HASHES (session_cache.cpp)
};

// ---- handlers -----------------------------------------------------------------------

Status Session::on_list_devices(WireReader& in, Reply& out) {
  if (!in.done())
    return protocol_error("LIST_DEVICES request: " + std::to_string(in.remaining()) + " unexpected bytes");
  ListDevicesReply reply;
  for (const auto& dev : env_.devices) {
    auto memory = dev->memory();
    if (!memory.ok()) return Status(memory.status().code(), "LIST_DEVICES: " + dev->name() + ": " + memory.status().message());
    const MemoryInfo mem = memory.value();
    reply.devices.push_back({dev->name(), dev->description(), static_cast<uint32_t>(dev->kind()), mem.free, mem.total,
                             dev->alignment(), dev->max_allocation()});
  }
  encode(out.fields, reply);
  return Status();
}

Status Session::on_device_memory(WireReader& in, Reply& out) {
  DeviceMemoryRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(check_device(req.device));
  auto mem = env_.devices[req.device]->memory();
  if (!mem.ok()) return mem.status();
  encode(out.fields, DeviceMemoryReply{mem.value().free, mem.value().total});
  return Status();
}

Status Session::on_buffer_alloc(WireReader& in, Reply& out) {
  BufferAllocRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(check_device(req.device));
  // Checked before the device is asked, so a refused request costs no memory.
  TENSORPC_RETURN_IF_ERROR(check_session_limits(req.size));
  Device& dev = *env_.devices[req.device];
  if (req.size > dev.max_allocation()) {
    return out_of_memory(dev.name() + ": " + std::to_string(req.size) + " bytes exceed the largest allocation of " +
                         std::to_string(dev.max_allocation()));
  }
  auto buffer = dev.allocate(req.size);
  if (!buffer.ok()) return buffer.status();
  const uint64_t handle = next_handle_++;
  const uint64_t size = buffer.value()->size();
  auto entry = std::make_shared<BufferEntry>(BufferEntry{std::move(buffer).value(), req.device});
  {
    MutexLock lock(table_->mutex);
    table_->entries.emplace(handle, std::move(entry));
  }
  largest_buffer_ = std::max(largest_buffer_, size);
  held_bytes_ += size;
  env_.counters->live_buffers += 1;
  env_.counters->buffer_bytes += size;
  encode(out.fields, BufferAllocReply{handle});
  return Status();
}

Status Session::on_buffer_free(WireReader& in, Reply&) {
  BufferFreeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto entry = find_buffer(req.handle);
  if (!entry.ok()) return entry.status();
  // A stored graph or plan that points into this buffer could never run safely again.
  forget_users_of(req.handle);
  held_bytes_ -= entry.value()->buffer->size();
  env_.counters->live_buffers -= 1;
  env_.counters->buffer_bytes -= entry.value()->buffer->size();
  std::shared_ptr<BufferEntry> freed;  // destroyed after the lock is released
  {
    MutexLock lock(table_->mutex);
    auto it = table_->entries.find(req.handle);
    freed = std::move(it->second);
    table_->entries.erase(it);
  }
  return Status();
}

Status Session::on_buffer_clear(WireReader& in, Reply&) {
  BufferClearRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto entry = find_buffer(req.handle);
  if (!entry.ok()) return entry.status();
  return entry.value()->buffer->clear(req.value);
}

// Streams its payload: the fixed fields, then the bytes straight into the
// buffer. An invalid request drains its bytes so the next frame is found.
Status Session::on_set_tensor(WireReader&, Reply&) {
  SetTensorRequest req;
  TENSORPC_RETURN_IF_ERROR(read_streamed_fields("SET_TENSOR", kSetTensorFixedSize, req));
  const uint64_t data = req.size;
  auto entry = find_range(req.handle, req.offset, req.size, "SET_TENSOR:");
  if (!entry.ok()) return fail_draining(data, entry.status());

  std::optional<Sha256Hasher> hasher;
  if ((current_.flags & kFlagCache) != 0 && env_.cache != nullptr) hasher.emplace();
  Status s = receive_into(*entry.value(), req.offset, req.size, hasher ? &*hasher : nullptr);
  if (!s.ok()) {
    closing_ = true;
    end_reason_ = s.message();
    return s;
  }
  if (hasher) {
    // The cache keeps its own copy: the buffer may change or be freed later.
    std::vector<uint8_t> bytes(req.size);
    TENSORPC_RETURN_IF_ERROR(read_bytes(*entry.value(), req.offset, bytes.data(), req.size));
    env_.cache->insert(hasher->finish(), std::move(bytes));
  }
  return Status();
}

Status Session::on_get_tensor(WireReader& in, Reply& out) {
  GetTensorRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto entry = find_range(req.handle, req.offset, req.size, "GET_TENSOR:");
  if (!entry.ok()) return entry.status();
  if (const void* base = entry.value()->buffer->host_base()) {
    out.bulk = std::span<const uint8_t>(static_cast<const uint8_t*>(base) + req.offset, req.size);
    return Status();
  }
  out.bulk_storage.resize(req.size);
  TENSORPC_RETURN_IF_ERROR(read_bytes(*entry.value(), req.offset, out.bulk_storage.data(), req.size));
  out.bulk = out.bulk_storage;
  return Status();
}

Status Session::on_copy_tensor(WireReader& in, Reply&) {
  CopyTensorRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  return copy_range(req.src_handle, req.src_offset, req.dst_handle, req.dst_offset, req.size);
}

Status Session::copy_range(uint64_t src_handle, uint64_t src_offset, uint64_t dst_handle, uint64_t dst_offset,
                           uint64_t size) {
  auto src = find_range(src_handle, src_offset, size, "COPY_TENSOR: source");
  if (!src.ok()) return src.status();
  auto dst = find_range(dst_handle, dst_offset, size, "COPY_TENSOR: destination");
  if (!dst.ok()) return dst.status();
  if (size == 0) return Status();
  Buffer& from = *src.value()->buffer;
  Buffer& to = *dst.value()->buffer;
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
  TENSORPC_RETURN_IF_ERROR(read_bytes(*src.value(), src_offset, staging.data(), size));
  return write_bytes(*dst.value(), dst_offset, staging.data(), size);
}

Status Session::on_graph_compute(WireReader& in, Reply&) {
  GraphComputeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(check_device(req.device));
  std::vector<uint64_t> used;
  const ResolveHandle resolve = [&](uint64_t handle, std::string* why) -> Buffer* {
    auto entry = find_buffer(handle);
    if (!entry.ok()) {
      *why = "not found (never issued on this connection, or freed)";
      return nullptr;
    }
    if (entry.value()->device != req.device) {
      *why = "lives on device " + std::to_string(entry.value()->device) + ", not on device " +
             std::to_string(req.device) + " of this graph";
      return nullptr;
    }
    used.push_back(handle);
    return entry.value()->buffer.get();
  };
  auto decoded = decode_graph(in, resolve);
  if (!decoded.ok()) return decoded.status();
  if (!in.done())
    return protocol_error("GRAPH_COMPUTE request: " + std::to_string(in.remaining()) +
                          " unexpected bytes after the graph");
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  std::erase_if(graphs_, [&](const StoredGraph& g) { return g.id == req.graph_id; });
  graphs_.push_front(StoredGraph{req.graph_id, req.device, std::move(decoded).value(), std::move(used)});
  if (graphs_.size() > kMaxStoredGraphs) graphs_.pop_back();
  return run_graph(graphs_.front());
}

Status Session::on_graph_recompute(WireReader& in, Reply&) {
  GraphRecomputeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(check_device(req.device));
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const StoredGraph& g) { return g.id == req.graph_id; });
  if (it == graphs_.end()) {
    return not_found("graph " + std::to_string(req.graph_id) + " not found (never computed on this connection, " +
                     "evicted — the " + std::to_string(kMaxStoredGraphs) +
                     " most recent are kept — or one of its buffers was freed)");
  }
  if (it->device != req.device) {
    return invalid_argument("graph " + std::to_string(req.graph_id) + " was computed on device " +
                            std::to_string(it->device) + ", not " + std::to_string(req.device));
  }
  // Most recently used first, so eviction drops the graph unused the longest.
  if (it != graphs_.begin()) {
    StoredGraph g = std::move(*it);
    graphs_.erase(it);
    graphs_.push_front(std::move(g));
  }
  return run_graph(graphs_.front());
}

Status Session::on_synchronize(WireReader& in, Reply&) {
  if (!in.done()) return protocol_error("SYNCHRONIZE request: " + std::to_string(in.remaining()) + " unexpected bytes");
  Status result = pending_;
  pending_ = Status();
  for (auto& stream : streams_) {
    if (!stream) continue;
    Status s = stream->synchronize();
    if (result.ok()) result = s;
  }
  return result;
}

Status Session::on_ping(WireReader& in, Reply&) {
  if (!in.done()) return protocol_error("PING request: " + std::to_string(in.remaining()) + " unexpected bytes");
  return Status();
}

}  // namespace tensorpc::rpc
