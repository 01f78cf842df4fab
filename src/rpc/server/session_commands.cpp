// Session's command handlers, one small function per command, and the
// table the frame loop (session.cpp) dispatches through. Here: devices,
// buffers (SessionBuffers) and graphs (StoredWork).
#include <array>
#include <optional>

#include "rpc/server/session.h"

namespace tensorpc::rpc {

// Every command's handler, named with its command: the table is filled by
// Command, not by position, and one left out fails to build.
constexpr std::array<Session::CommandSpec, kCommandCount> Session::command_table() {
  using Spec = CommandSpec;
  std::array<Spec, kCommandCount> t{};
  const auto at = [&t](Command c) -> Spec& { return t[static_cast<uint16_t>(c)]; };
  at(Command::hello) = {&Session::on_hello, false};  // session_handshake.cpp
  at(Command::auth) = {&Session::on_auth, false};    // session_handshake.cpp
  at(Command::list_devices) = {&Session::on_list_devices, false};
  at(Command::device_memory) = {&Session::on_device_memory, false};
  at(Command::supports) = {&Session::on_supports, false};
  at(Command::buffer_alloc) = {&Session::on_buffer_alloc, false};
  at(Command::buffer_free) = {&Session::on_buffer_free, false};
  at(Command::buffer_clear) = {&Session::on_buffer_clear, false};
  at(Command::set_tensor) = {&Session::on_set_tensor, /*streams_payload=*/true};
  at(Command::get_tensor) = {&Session::on_get_tensor, false};
  at(Command::copy_tensor) = {&Session::on_copy_tensor, false};
  at(Command::graph_compute) = {&Session::on_graph_compute, false};
  at(Command::graph_recompute) = {&Session::on_graph_recompute, false};
  at(Command::synchronize) = {&Session::on_synchronize, false};
  at(Command::ping) = {&Session::on_ping, false};
  // The weights cache (session_cache.cpp).
  at(Command::set_tensor_hash) = {&Session::on_set_tensor_hash, false};
  at(Command::set_tensor_hashes) = {&Session::on_set_tensor_hashes, false};
  at(Command::keepalive) = {&Session::on_keepalive, false};
  // Server-to-server copies (session_peer.cpp).
  at(Command::grant_write) = {&Session::on_grant_write, false};
  at(Command::copy_to_peer) = {&Session::on_copy_to_peer, false};
  at(Command::write_granted) = {&Session::on_write_granted, /*streams_payload=*/true};
  // Execution plans (session_plan.cpp).
  at(Command::plan_store) = {&Session::on_plan_store, false};
  at(Command::plan_run) = {&Session::on_plan_run, false};
  at(Command::grant_standing) = {&Session::on_grant_standing, false};
  return t;
}

namespace {

template <typename Table>
constexpr bool every_command_handled(const Table& table) {
  for (const auto& spec : table) {
    if (spec.handler == nullptr) return false;
  }
  return true;
}

}  // namespace

const std::array<Session::CommandSpec, kCommandCount> Session::kCommands = [] {
  constexpr std::array<CommandSpec, kCommandCount> table = command_table();
  static_assert(every_command_handled(table), "a command without a handler in command_table()");
  return table;
}();

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

// The node's descriptors only: no handle of the session is named or used.
Status Session::on_supports(WireReader& in, Reply& out) {
  SupportsRequest req;
  TENSORPC_RETURN_IF_ERROR(decode(in, req));
  TENSORPC_RETURN_IF_ERROR(buffers_.check_device(req.device));
  Device& device = *env_.devices[req.device];
  TENSORPC_ASSIGN_OR_RETURN(DecodedGraph decoded, decode_unplaced_graph(in, device));
  if (!in.done()) {
    return protocol_error("SUPPORTS request: " + std::to_string(in.remaining()) + " unexpected bytes after the graph");
  }
  SupportsReply reply;
  for (const Tensor* node : decoded.graph.nodes()) reply.computes.push_back(device.supports(*node));
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
  auto decoded = decode_graph(in, buffers_.resolver(req.device, used));
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
  auto g = graph_to_run(req.graph_id, req.device);
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

Status Session::on_keepalive(WireReader&, Reply&) {
  return protocol_error("KEEPALIVE comes from servers, not to them");
}

Status Session::on_ping(WireReader& in, Reply&) {
  if (!in.done()) return protocol_error("PING request: " + std::to_string(in.remaining()) + " unexpected bytes");
  return Status();
}

}  // namespace tensorpc::rpc
