// Encoders and decoders of the frame header, the reply status and every
// message of docs/protocol.md, each decoder next to its encoder.
//
// Decoders read through FieldReader, which remembers the first field that
// could not be read and why, so every failure names the message and the field
// ("HELLO request: field 'client' is truncated") without a check after each
// read.
#include "rpc/wire/messages.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace tensorpc::rpc {
namespace {

Status protocol_error(std::string msg) { return {StatusCode::protocol_error, std::move(msg)}; }

// Bytes a DeviceInfo takes at the least (two empty strings): bounds the count
// of LIST_DEVICES before anything is allocated for it.
constexpr size_t kMinDeviceInfoBytes = 4 + 4 + 4 + 4 * 8;

class FieldReader {
 public:
  FieldReader(WireReader& r, Command c, const char* kind) : r_(r), command_(c), kind_(kind) {}

  void u8(uint8_t& v, const char* field) {
    read(v, field, [this] { return r_.u8(); });
  }
  void u32(uint32_t& v, const char* field) {
    read(v, field, [this] { return r_.u32(); });
  }
  void u64(uint64_t& v, const char* field) {
    read(v, field, [this] { return r_.u64(); });
  }
  void str(std::string& v, const char* field) {
    uint32_t n = 0;
    u32(n, field);
    if (!status_.ok()) return;
    if (n > kMaxWireString) {
      fail(field, "is " + std::to_string(n) + " bytes long, more than the limit of " + std::to_string(kMaxWireString));
      return;
    }
    const std::span<const uint8_t> b = r_.raw(n);
    if (!r_.ok()) return fail(field, "is truncated");
    v.assign(reinterpret_cast<const char*>(b.data()), b.size());
  }
  void bytes(uint8_t* out, size_t n, const char* field) {
    if (!status_.ok()) return;
    const std::span<const uint8_t> b = r_.raw(n);
    if (!r_.ok()) return fail(field, "is truncated");
    std::memcpy(out, b.data(), n);
  }
  // Records a value out of range; the first failure wins.
  void fail(const char* field, const std::string& why) {
    if (status_.ok()) status_ = protocol_error(prefix() + "field '" + field + "' " + why);
  }
  bool ok() const { return status_.ok(); }
  size_t remaining() const { return r_.remaining(); }

  // The result of a decoder that read a whole payload: no bytes may remain.
  Status finish_whole() {
    if (status_.ok() && !r_.done()) {
      status_ = protocol_error(prefix() + std::to_string(r_.remaining()) + " unexpected trailing bytes");
    }
    return status_;
  }
  // The result of a decoder that read the leading fixed part of a payload.
  Status finish_prefix() const { return status_; }

 private:
  template <typename T, typename F>
  void read(T& v, const char* field, F get) {
    if (!status_.ok()) return;
    const T x = static_cast<T>(get());
    if (!r_.ok()) return fail(field, "is truncated");
    v = x;
  }
  std::string prefix() const { return std::string(name_of(command_)) + " " + kind_ + ": "; }

  WireReader& r_;
  Command command_;
  const char* kind_;
  Status status_;
};

FieldReader request(WireReader& r, Command c) { return FieldReader(r, c, "request"); }
FieldReader reply(WireReader& r, Command c) { return FieldReader(r, c, "reply"); }

// The fields of SET_TENSOR_HASH, which are also each entry of SET_TENSOR_HASHES.
void read_hash_entry(FieldReader& f, SetTensorHashRequest& m) {
  f.u64(m.handle, "handle");
  f.u64(m.offset, "offset");
  f.u64(m.size, "size");
  f.bytes(m.sha256.data(), m.sha256.size(), "sha256");
}

// A count of at most kMaxHashEntries, whose items take `bytes_for(count)`
// bytes: checked before anything is allocated for them.
template <typename BytesFor>
uint32_t read_hash_count(FieldReader& f, BytesFor bytes_for) {
  uint32_t count = 0;
  f.u32(count, "count");
  if (!f.ok()) return 0;
  if (count > kMaxHashEntries) {
    f.fail("count", "is " + std::to_string(count) + ", more than the limit of " + std::to_string(kMaxHashEntries));
    return 0;
  }
  if (f.remaining() < bytes_for(count)) {
    f.fail("count", "says " + std::to_string(count) + " entries, which take " + std::to_string(bytes_for(count)) +
                        " bytes, but the payload is truncated: " + std::to_string(f.remaining()) + " follow");
    return 0;
  }
  return count;
}

}  // namespace

const char* name_of(Command c) {
  switch (c) {
    case Command::hello: return "HELLO";
    case Command::list_devices: return "LIST_DEVICES";
    case Command::device_memory: return "DEVICE_MEMORY";
    case Command::buffer_alloc: return "BUFFER_ALLOC";
    case Command::buffer_free: return "BUFFER_FREE";
    case Command::buffer_clear: return "BUFFER_CLEAR";
    case Command::set_tensor: return "SET_TENSOR";
    case Command::set_tensor_hash: return "SET_TENSOR_HASH";
    case Command::get_tensor: return "GET_TENSOR";
    case Command::copy_tensor: return "COPY_TENSOR";
    case Command::graph_compute: return "GRAPH_COMPUTE";
    case Command::graph_recompute: return "GRAPH_RECOMPUTE";
    case Command::synchronize: return "SYNCHRONIZE";
    case Command::ping: return "PING";
    case Command::grant_write: return "GRANT_WRITE";
    case Command::copy_to_peer: return "COPY_TO_PEER";
    case Command::write_granted: return "WRITE_GRANTED";
    case Command::plan_store: return "PLAN_STORE";
    case Command::plan_run: return "PLAN_RUN";
    case Command::grant_standing: return "GRANT_STANDING";
    case Command::auth: return "AUTH";
    case Command::set_tensor_hashes: return "SET_TENSOR_HASHES";
  }
  return "UNKNOWN_COMMAND";
}

// ---- frame header ------------------------------------------------------------

void encode_header(const FrameHeader& h, uint8_t out[kFrameHeaderSize]) {
  WireWriter w;
  w.u32(h.magic);
  w.u16(static_cast<uint16_t>(h.command));
  w.u16(h.flags);
  w.u64(h.request_id);
  w.u64(h.payload_length);
  std::memcpy(out, w.bytes().data(), kFrameHeaderSize);
}

StatusOr<FrameHeader> decode_header(std::span<const uint8_t, kFrameHeaderSize> bytes) {
  WireReader r(bytes);
  FrameHeader h;
  h.magic = r.u32();
  const uint16_t command = r.u16();
  h.flags = r.u16();  // unknown flag bits are ignored: a newer minor version may add them
  h.request_id = r.u64();
  h.payload_length = r.u64();
  if (h.magic != kFrameMagic) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%08x", h.magic);
    return protocol_error(std::string("frame header: bad magic ") + magic +
                          " (not a tensorpc peer, or the stream lost its place)");
  }
  if (command >= kCommandCount) {
    return protocol_error("frame header: unknown command " + std::to_string(command));
  }
  h.command = static_cast<Command>(command);
  return h;
}

// ---- status --------------------------------------------------------------------

void encode_status(WireWriter& w, const Status& s) {
  w.u32(static_cast<uint32_t>(s.code()));
  w.str(s.ok() ? std::string_view() : std::string_view(s.message()));
}

Status decode_status(WireReader& r) {
  const uint32_t code = r.u32();
  std::string message = r.str();
  if (!r.ok()) return protocol_error("reply status: truncated, or a message longer than the limit");
  if (code > static_cast<uint32_t>(StatusCode::internal)) {
    return protocol_error("reply status: unknown status code " + std::to_string(code));
  }
  if (code == 0) return Status();  // a message on success means nothing
  return Status(static_cast<StatusCode>(code), std::move(message));
}

// ---- HELLO ----------------------------------------------------------------------

void encode(WireWriter& w, const HelloRequest& m) {
  w.u32(m.major);
  w.u32(m.minor);
  w.u32(m.patch);
  w.u64(m.features);
  w.str(m.client);
}

Status decode(WireReader& r, HelloRequest& m) {
  FieldReader f = request(r, Command::hello);
  f.u32(m.major, "major");
  f.u32(m.minor, "minor");
  f.u32(m.patch, "patch");
  f.u64(m.features, "features");
  f.str(m.client, "client");
  return f.finish_whole();
}

void encode(WireWriter& w, const HelloReply& m) {
  w.u32(m.major);
  w.u32(m.minor);
  w.u32(m.patch);
  w.u64(m.features);
  w.str(m.server);
  if (m.features & kFeatureKey) w.raw(m.server_nonce.data(), m.server_nonce.size());
}

Status decode(WireReader& r, HelloReply& m) {
  FieldReader f = reply(r, Command::hello);
  f.u32(m.major, "major");
  f.u32(m.minor, "minor");
  f.u32(m.patch, "patch");
  f.u64(m.features, "features");
  f.str(m.server, "server");
  if (m.features & kFeatureKey) f.bytes(m.server_nonce.data(), m.server_nonce.size(), "server_nonce");
  return f.finish_whole();
}

// ---- LIST_DEVICES ---------------------------------------------------------------

void encode(WireWriter& w, const ListDevicesReply& m) {
  w.u32(static_cast<uint32_t>(m.devices.size()));
  for (const DeviceInfo& d : m.devices) {
    w.str(d.name);
    w.str(d.description);
    w.u32(d.kind);
    w.u64(d.free);
    w.u64(d.total);
    w.u64(d.alignment);
    w.u64(d.max_allocation);
  }
}

Status decode(WireReader& r, ListDevicesReply& m) {
  FieldReader f = reply(r, Command::list_devices);
  uint32_t count = 0;
  f.u32(count, "count");
  // Checked before reserving, so a forged count cannot make us allocate.
  if (f.ok() && count > f.remaining() / kMinDeviceInfoBytes) {
    f.fail("count", "says " + std::to_string(count) +
                        " devices but the payload is truncated: " + std::to_string(f.remaining()) +
                        " bytes remain and each device takes at least " + std::to_string(kMinDeviceInfoBytes));
  }
  m.devices.clear();
  if (f.ok()) m.devices.reserve(count);
  for (uint32_t i = 0; i < count && f.ok(); ++i) {
    DeviceInfo d;
    f.str(d.name, "name");
    f.str(d.description, "description");
    f.u32(d.kind, "kind");
    if (f.ok() && d.kind > 2)
      f.fail("kind",
             std::to_string(d.kind) + " of device " + std::to_string(i) + " is not 0 (cpu), 1 (gpu) or 2 (remote)");
    f.u64(d.free, "free");
    f.u64(d.total, "total");
    f.u64(d.alignment, "alignment");
    f.u64(d.max_allocation, "max_allocation");
    if (f.ok()) m.devices.push_back(std::move(d));
  }
  return f.finish_whole();
}

// ---- DEVICE_MEMORY --------------------------------------------------------------

void encode(WireWriter& w, const DeviceMemoryRequest& m) { w.u32(m.device); }

Status decode(WireReader& r, DeviceMemoryRequest& m) {
  FieldReader f = request(r, Command::device_memory);
  f.u32(m.device, "device");
  return f.finish_whole();
}

void encode(WireWriter& w, const DeviceMemoryReply& m) {
  w.u64(m.free);
  w.u64(m.total);
}

Status decode(WireReader& r, DeviceMemoryReply& m) {
  FieldReader f = reply(r, Command::device_memory);
  f.u64(m.free, "free");
  f.u64(m.total, "total");
  return f.finish_whole();
}

// ---- BUFFER_ALLOC / BUFFER_FREE / BUFFER_CLEAR ------------------------------------

void encode(WireWriter& w, const BufferAllocRequest& m) {
  w.u32(m.device);
  w.u64(m.size);
}

Status decode(WireReader& r, BufferAllocRequest& m) {
  FieldReader f = request(r, Command::buffer_alloc);
  f.u32(m.device, "device");
  f.u64(m.size, "size");
  return f.finish_whole();
}

void encode(WireWriter& w, const BufferAllocReply& m) { w.u64(m.handle); }

Status decode(WireReader& r, BufferAllocReply& m) {
  FieldReader f = reply(r, Command::buffer_alloc);
  f.u64(m.handle, "handle");
  if (f.ok() && m.handle == 0) f.fail("handle", "is 0, which is never issued");
  return f.finish_whole();
}

void encode(WireWriter& w, const BufferFreeRequest& m) { w.u64(m.handle); }

Status decode(WireReader& r, BufferFreeRequest& m) {
  FieldReader f = request(r, Command::buffer_free);
  f.u64(m.handle, "handle");
  return f.finish_whole();
}

void encode(WireWriter& w, const BufferClearRequest& m) {
  w.u64(m.handle);
  w.u8(m.value);
}

Status decode(WireReader& r, BufferClearRequest& m) {
  FieldReader f = request(r, Command::buffer_clear);
  f.u64(m.handle, "handle");
  f.u8(m.value, "value");
  return f.finish_whole();
}

// ---- SET_TENSOR / SET_TENSOR_HASH / GET_TENSOR / COPY_TENSOR --------------------------

void encode(WireWriter& w, const SetTensorRequest& m) {
  w.u64(m.handle);
  w.u64(m.offset);
  w.u64(m.size);
}

// Only the fixed part: `size` bytes of data follow, read by the caller.
Status decode(WireReader& r, SetTensorRequest& m) {
  FieldReader f = request(r, Command::set_tensor);
  f.u64(m.handle, "handle");
  f.u64(m.offset, "offset");
  f.u64(m.size, "size");
  return f.finish_prefix();
}

void encode(WireWriter& w, const SetTensorHashRequest& m) {
  w.u64(m.handle);
  w.u64(m.offset);
  w.u64(m.size);
  w.raw(m.sha256.data(), m.sha256.size());
}

Status decode(WireReader& r, SetTensorHashRequest& m) {
  FieldReader f = request(r, Command::set_tensor_hash);
  read_hash_entry(f, m);
  return f.finish_whole();
}

void encode(WireWriter& w, const SetTensorHashReply& m) { w.u8(m.found ? 1 : 0); }

Status decode(WireReader& r, SetTensorHashReply& m) {
  FieldReader f = reply(r, Command::set_tensor_hash);
  uint8_t found = 0;
  f.u8(found, "found");
  if (f.ok() && found > 1) f.fail("found", "is " + std::to_string(found) + ", not 0 or 1");
  m.found = found == 1;
  return f.finish_whole();
}

void encode(WireWriter& w, const GetTensorRequest& m) {
  w.u64(m.handle);
  w.u64(m.offset);
  w.u64(m.size);
}

Status decode(WireReader& r, GetTensorRequest& m) {
  FieldReader f = request(r, Command::get_tensor);
  f.u64(m.handle, "handle");
  f.u64(m.offset, "offset");
  f.u64(m.size, "size");
  return f.finish_whole();
}

void encode(WireWriter& w, const CopyTensorRequest& m) {
  w.u64(m.src_handle);
  w.u64(m.src_offset);
  w.u64(m.dst_handle);
  w.u64(m.dst_offset);
  w.u64(m.size);
}

Status decode(WireReader& r, CopyTensorRequest& m) {
  FieldReader f = request(r, Command::copy_tensor);
  f.u64(m.src_handle, "src_handle");
  f.u64(m.src_offset, "src_offset");
  f.u64(m.dst_handle, "dst_handle");
  f.u64(m.dst_offset, "dst_offset");
  f.u64(m.size, "size");
  return f.finish_whole();
}

// ---- GRAPH_COMPUTE / GRAPH_RECOMPUTE ----------------------------------------------

void encode(WireWriter& w, const GraphComputeRequest& m) {
  w.u32(m.device);
  w.u64(m.graph_id);
}

// Only the fixed part: the graph follows (decode_graph, graph_codec.h).
Status decode(WireReader& r, GraphComputeRequest& m) {
  FieldReader f = request(r, Command::graph_compute);
  f.u32(m.device, "device");
  f.u64(m.graph_id, "graph_id");
  return f.finish_prefix();
}

void encode(WireWriter& w, const GraphRecomputeRequest& m) {
  w.u32(m.device);
  w.u64(m.graph_id);
}

Status decode(WireReader& r, GraphRecomputeRequest& m) {
  FieldReader f = request(r, Command::graph_recompute);
  f.u32(m.device, "device");
  f.u64(m.graph_id, "graph_id");
  return f.finish_whole();
}

// ---- GRANT_WRITE / COPY_TO_PEER / WRITE_GRANTED -------------------------------------

void encode(WireWriter& w, const GrantWriteRequest& m) {
  w.u64(m.handle);
  w.u64(m.offset);
  w.u64(m.size);
}

Status decode(WireReader& r, GrantWriteRequest& m) {
  FieldReader f = request(r, Command::grant_write);
  f.u64(m.handle, "handle");
  f.u64(m.offset, "offset");
  f.u64(m.size, "size");
  return f.finish_whole();
}

void encode(WireWriter& w, const GrantWriteReply& m) { w.raw(m.token.data(), m.token.size()); }

Status decode(WireReader& r, GrantWriteReply& m) {
  FieldReader f = reply(r, Command::grant_write);
  f.bytes(m.token.data(), m.token.size(), "token");
  return f.finish_whole();
}

void encode(WireWriter& w, const CopyToPeerRequest& m) {
  w.u64(m.src_handle);
  w.u64(m.src_offset);
  w.u64(m.size);
  w.str(m.endpoint);
  w.raw(m.token.data(), m.token.size());
}

Status decode(WireReader& r, CopyToPeerRequest& m) {
  FieldReader f = request(r, Command::copy_to_peer);
  f.u64(m.src_handle, "src_handle");
  f.u64(m.src_offset, "src_offset");
  f.u64(m.size, "size");
  f.str(m.endpoint, "endpoint");
  f.bytes(m.token.data(), m.token.size(), "token");
  return f.finish_whole();
}

void encode(WireWriter& w, const WriteGrantedRequest& m) {
  w.raw(m.token.data(), m.token.size());
  w.u64(m.size);
}

// Only the fixed part: `size` bytes of data follow, read by the caller.
Status decode(WireReader& r, WriteGrantedRequest& m) {
  FieldReader f = request(r, Command::write_granted);
  f.bytes(m.token.data(), m.token.size(), "token");
  f.u64(m.size, "size");
  return f.finish_prefix();
}

// ---- GRANT_STANDING / PLAN_STORE / PLAN_RUN (1.2) ------------------------------------

void encode(WireWriter& w, const GrantStandingRequest& m) {
  w.u64(m.handle);
  w.u64(m.offset);
  w.u64(m.size);
}

Status decode(WireReader& r, GrantStandingRequest& m) {
  FieldReader f = request(r, Command::grant_standing);
  f.u64(m.handle, "handle");
  f.u64(m.offset, "offset");
  f.u64(m.size, "size");
  return f.finish_whole();
}

void encode(WireWriter& w, const GrantStandingReply& m) { w.raw(m.token.data(), m.token.size()); }

Status decode(WireReader& r, GrantStandingReply& m) {
  FieldReader f = reply(r, Command::grant_standing);
  f.bytes(m.token.data(), m.token.size(), "token");
  return f.finish_whole();
}

void encode(WireWriter& w, const PlanStoreRequest& m) { w.u64(m.plan_id); }

// Only the fixed part: the steps follow (decode_plan_steps, plan_codec.h).
Status decode(WireReader& r, PlanStoreRequest& m) {
  FieldReader f = request(r, Command::plan_store);
  f.u64(m.plan_id, "plan_id");
  return f.finish_prefix();
}

void encode(WireWriter& w, const PlanRunRequest& m) { w.u64(m.plan_id); }

Status decode(WireReader& r, PlanRunRequest& m) {
  FieldReader f = request(r, Command::plan_run);
  f.u64(m.plan_id, "plan_id");
  return f.finish_whole();
}

// ---- SET_TENSOR_HASHES (1.5) ------------------------------------------------------------

void encode(WireWriter& w, const SetTensorHashesRequest& m) {
  w.u32(static_cast<uint32_t>(m.entries.size()));
  for (const SetTensorHashRequest& e : m.entries) encode(w, e);
}

Status decode(WireReader& r, SetTensorHashesRequest& m) {
  FieldReader f = request(r, Command::set_tensor_hashes);
  const uint32_t count = read_hash_count(f, [](uint64_t n) { return n * kHashEntrySize; });
  m.entries.assign(count, SetTensorHashRequest{});
  for (SetTensorHashRequest& e : m.entries) read_hash_entry(f, e);
  return f.finish_whole();
}

void encode(WireWriter& w, const SetTensorHashesReply& m) {
  w.u32(static_cast<uint32_t>(m.found.size()));
  for (size_t byte = 0; byte * 8 < m.found.size(); ++byte) {
    uint8_t bits = 0;
    for (size_t i = byte * 8; i < std::min(m.found.size(), byte * 8 + 8); ++i) {
      if (m.found[i]) bits |= static_cast<uint8_t>(1u << (i % 8));
    }
    w.u8(bits);
  }
}

Status decode(WireReader& r, SetTensorHashesReply& m) {
  FieldReader f = reply(r, Command::set_tensor_hashes);
  const uint32_t count = read_hash_count(f, [](uint64_t n) { return (n + 7) / 8; });
  m.found.assign(count, false);
  for (uint32_t byte = 0; byte * 8 < count && f.ok(); ++byte) {
    uint8_t bits = 0;
    f.u8(bits, "found");
    const uint32_t used = std::min<uint32_t>(8, count - byte * 8);
    if (f.ok() && used < 8 && (bits >> used) != 0) {
      f.fail("found", "has bits set past entry " + std::to_string(count - 1));
    }
    for (uint32_t i = 0; i < used; ++i) m.found[byte * 8 + i] = ((bits >> i) & 1) != 0;
  }
  return f.finish_whole();
}

// ---- AUTH (1.3) ------------------------------------------------------------------------

void encode(WireWriter& w, const AuthRequest& m) {
  w.raw(m.client_nonce.data(), m.client_nonce.size());
  w.raw(m.client_proof.data(), m.client_proof.size());
}

Status decode(WireReader& r, AuthRequest& m) {
  FieldReader f = request(r, Command::auth);
  f.bytes(m.client_nonce.data(), m.client_nonce.size(), "client_nonce");
  f.bytes(m.client_proof.data(), m.client_proof.size(), "client_proof");
  return f.finish_whole();
}

void encode(WireWriter& w, const AuthReply& m) { w.raw(m.server_proof.data(), m.server_proof.size()); }

Status decode(WireReader& r, AuthReply& m) {
  FieldReader f = reply(r, Command::auth);
  f.bytes(m.server_proof.data(), m.server_proof.size(), "server_proof");
  return f.finish_whole();
}

}  // namespace tensorpc::rpc
