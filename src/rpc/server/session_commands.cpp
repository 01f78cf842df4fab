// Session's command handlers, one small function per command, and the
// table the frame loop (session.cpp) dispatches through. Here: devices,
// buffers (SessionBuffers) and graphs (StoredWork).
#include <optional>

#include "rpc/server/session.h"

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
    if (!memory.ok())
      return Status(memory.status().code(), "LIST_DEVICES: " + dev->name() + ": " + memory.status().message());
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
  TENSORPC_RETURN_IF_ERROR(buffers_.check_device(req.device));
  auto mem = env_.devices[req.device]->memory();
  if (!mem.ok()) return mem.status();
  encode(out.fields, DeviceMemoryReply{mem.value().free, mem.value().total});
  return Status();
}

Status Session::on_buffer_alloc(WireReader& in, Reply& out) {
  BufferAllocRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(buffers_.check_device(req.device));
  auto handle = buffers_.allocate(req.device, req.size);
  if (!handle.ok()) return handle.status();
  encode(out.fields, BufferAllocReply{handle.value()});
  return Status();
}

Status Session::on_buffer_free(WireReader& in, Reply&) {
  BufferFreeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto entry = buffers_.find(req.handle);
  if (!entry.ok()) return entry.status();
  // A stored graph or plan that points into this buffer could never run safely again.
  work_.forget_users_of(req.handle);
  buffers_.free(req.handle);
  return Status();
}

Status Session::on_buffer_clear(WireReader& in, Reply&) {
  BufferClearRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  auto entry = buffers_.find(req.handle);
  if (!entry.ok()) return entry.status();
  return entry.value()->buffer->clear(req.value);
}

// Streams its payload: the fixed fields, then the bytes straight into the
// buffer. An invalid request drains its bytes so the next frame is found.
Status Session::on_set_tensor(WireReader&, Reply&) {
  SetTensorRequest req;
  TENSORPC_RETURN_IF_ERROR(channel_.read_streamed_fields("SET_TENSOR", kSetTensorFixedSize, req));
  const uint64_t data = req.size;
  auto entry = buffers_.find_range(req.handle, req.offset, req.size, "SET_TENSOR:");
  if (!entry.ok()) return channel_.fail_draining(data, entry.status());

  std::optional<Sha256Hasher> hasher;
  if ((channel_.current().flags & kFlagCache) != 0 && env_.cache != nullptr) hasher.emplace();
  Status s = receive_into(*entry.value(), req.offset, req.size, hasher ? &*hasher : nullptr);
  if (!s.ok()) {
    channel_.end(s.message());
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
  auto entry = buffers_.find_range(req.handle, req.offset, req.size, "GET_TENSOR:");
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
  return buffers_.copy_range(req.src_handle, req.src_offset, req.dst_handle, req.dst_offset, req.size);
}

Status Session::on_graph_compute(WireReader& in, Reply&) {
  GraphComputeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(buffers_.check_device(req.device));
  std::vector<uint64_t> used;
  const ResolveHandle resolve = [&](uint64_t handle, std::string* why) -> Buffer* {
    auto entry = buffers_.find(handle);
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
  StoredGraph& g =
      work_.store_graph(StoredGraph{req.graph_id, req.device, std::move(decoded).value(), std::move(used)});
  return buffers_.compute_on(g.device, g.graph.graph);
}

Status Session::on_graph_recompute(WireReader& in, Reply&) {
  GraphRecomputeRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(buffers_.check_device(req.device));
  auto g = work_.use_graph(req.graph_id, req.device);
  if (!g.ok()) return g.status();
  return buffers_.compute_on(g.value()->device, g.value()->graph.graph);
}

Status Session::on_synchronize(WireReader& in, Reply&) {
  if (!in.done()) return protocol_error("SYNCHRONIZE request: " + std::to_string(in.remaining()) + " unexpected bytes");
  Status result = pending_;
  pending_ = Status();
  Status s = buffers_.synchronize();
  if (result.ok()) result = s;
  return result;
}

Status Session::on_ping(WireReader& in, Reply&) {
  if (!in.done()) return protocol_error("PING request: " + std::to_string(in.remaining()) + " unexpected bytes");
  return Status();
}

}  // namespace tensorpc::rpc
