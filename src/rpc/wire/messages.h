// The frames and messages of the wire protocol (docs/protocol.md).
//
// One request struct and one reply struct per command, each declared once:
// its fields in wire order, with their bounds (message_fields.h). From that
// declaration follow the encoder, which writes the payload (not the frame
// header), and the decoder, which reads a whole payload and fails — returning
// a Status that names the command and the field — on truncation, trailing
// bytes, or a value out of range. Bulk bytes (SET_TENSOR's and
// WRITE_GRANTED's data, GET_TENSOR's reply data) are not part of these
// structs: they travel straight between the socket and the caller's memory,
// after the fixed fields.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rpc/wire/message_fields.h"
#include "rpc/wire/wire.h"
#include "tensorpc/status.h"
#include "tensorpc/version.h"

namespace tensorpc::rpc {

// The protocol's version, written once in the top CMakeLists.txt (with what
// each minor version added) and generated into tensorpc/version.h.
inline constexpr uint32_t kVersionMajor = kProtocolVersionMajor;
inline constexpr uint32_t kVersionMinor = kProtocolVersionMinor;
// The first minor version (of major 1) whose servers compute Op::top_k.
inline constexpr uint32_t kTopKMinor = 6;
// The first whose servers take set_rows with a strided destination.
inline constexpr uint32_t kStridedSetRowsMinor = 7;
// tanh, and rope with frequency factors or YaRN: from 1.8.
inline constexpr uint32_t kRopeTanhMinor = 8;
// From 1.9 a server skips each run by id flagged SYNC that follows one naming
// a graph or plan it no longer holds, until the next store, replying
// kSkippedRun: a client may send several such runs before reading replies.
inline constexpr uint32_t kSkipAfterDroppedMinor = 9;
// The sample op: from 1.10.
inline constexpr uint32_t kSampleMinor = 10;
// SUPPORTS, which says whether a device computes a node (a GPU computes only
// some): from 1.11. An older server's devices compute every op it knows.
inline constexpr uint32_t kSupportsMinor = 11;
// The mixture-of-experts ops mul_mat_id, top_k_ids, swiglu_clamp and
// sigmoid, soft_max with attention sinks (a src[2]) and the mxfp4 weight type:
// from 1.12. An older server refuses the ops as unknown, the sinks as a
// source soft_max does not read and type 39 as unknown.
inline constexpr uint32_t kMoeMinor = 12;
inline constexpr const char* kSkippedRun = "not run: an earlier run named a graph or plan this server no longer holds";
inline constexpr uint32_t kVersionPatch = kProtocolVersionPatch;
inline constexpr uint32_t kFrameMagic = 0x43505254;  // "TRPC"
inline constexpr size_t kFrameHeaderSize = 24;

enum class Command : uint16_t {
  hello = 0,  // never renumbered
  list_devices = 1,
  device_memory = 2,
  buffer_alloc = 3,
  buffer_free = 4,
  buffer_clear = 5,
  set_tensor = 6,
  set_tensor_hash = 7,
  get_tensor = 8,
  copy_tensor = 9,
  graph_compute = 10,
  graph_recompute = 11,
  synchronize = 12,
  ping = 13,
  grant_write = 14,        // 1.1
  copy_to_peer = 15,       // 1.1
  write_granted = 16,      // 1.1
  plan_store = 17,         // 1.2
  plan_run = 18,           // 1.2
  grant_standing = 19,     // 1.2
  auth = 20,               // 1.3
  set_tensor_hashes = 21,  // 1.5
  keepalive = 22,          // 1.9: server to client only, see kFeatureKeepAlive
  supports = 23,           // 1.11
};
inline constexpr uint16_t kCommandCount = 24;
const char* name_of(Command c);
// Commands that change nothing on the server: a client may send one before
// it has read the replies of its runs by id, and ask it again after a resend.
constexpr bool only_reads(Command c) {
  return c == Command::get_tensor || c == Command::synchronize || c == Command::ping || c == Command::list_devices ||
         c == Command::device_memory || c == Command::supports;
}

enum FrameFlag : uint16_t {
  kFlagReply = 1u << 0,
  kFlagNoReply = 1u << 1,
  kFlagCache = 1u << 2,
  // 1.3: before the command runs, the connection's pending error (the first
  // failed NO_REPLY command since the last SYNCHRONIZE) is reported instead,
  // and the command does not run: a SYNCHRONIZE and a request in one frame.
  kFlagSync = 1u << 3,
};

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  Command command = Command::hello;
  uint16_t flags = 0;
  uint64_t request_id = 0;
  uint64_t payload_length = 0;
};
void encode_header(const FrameHeader& h, uint8_t out[kFrameHeaderSize]);
// Fails on a wrong magic or an unknown command.
StatusOr<FrameHeader> decode_header(std::span<const uint8_t, kFrameHeaderSize> bytes);

// Every reply payload starts with a status (code + message).
void encode_status(WireWriter& w, const Status& s);
Status decode_status(WireReader& r);  // returns the decoded status, or a protocol error

// ---- per-command messages ---------------------------------------------------
// Each struct is declared once: its place on the wire (`wire`) and its fields
// in wire order (`visit_fields`, in the vocabulary of message_fields.h). The
// encoder, the decoder and their bounds all follow from that declaration.
//
// HELLO's feature bits (1.3). kFeatureKey in a request: the client holds a
// key and will prove it; in a reply: the server holds one, and its nonce
// follows the reply's other fields (docs/protocol.md, "Keys").
inline constexpr uint64_t kFeatureKey = uint64_t{1} << 0;
// kFeatureKeepAlive (1.9) in a request: while the server works on a frame of
// this client for longer than kKeepAliveInterval, it sends a KEEPALIVE frame
// (flagged REPLY, request id 0, no payload) every interval, so the client can
// tell a long computation from a frozen server. Servers ignore the bit in
// replies.
inline constexpr uint64_t kFeatureKeepAlive = uint64_t{1} << 1;
inline constexpr std::chrono::milliseconds kKeepAliveInterval{250};
inline constexpr size_t kAuthNonceSize = 32;
inline constexpr size_t kAuthProofSize = 32;  // an HMAC-SHA-256
using AuthNonce = std::array<uint8_t, kAuthNonceSize>;
using AuthProof = std::array<uint8_t, kAuthProofSize>;

struct HelloRequest {
  static constexpr WireMessage wire{Command::hello, Direction::request};
  uint32_t major = kVersionMajor, minor = kVersionMinor, patch = kVersionPatch;
  uint64_t features = 0;
  std::string client;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("major", major);
    v.u32("minor", minor);
    v.u32("patch", patch);
    v.u64("features", features);
    v.str("client", client);
  }
};
// The largest HELLO request: its fixed fields and the longest string.
inline constexpr size_t kMaxHelloRequestSize = 3 * 4 + 8 + 4 + kMaxWireString;
struct HelloReply {
  static constexpr WireMessage wire{Command::hello, Direction::reply};
  uint32_t major = kVersionMajor, minor = kVersionMinor, patch = kVersionPatch;
  uint64_t features = 0;
  std::string server;
  AuthNonce server_nonce{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("major", major);
    v.u32("minor", minor);
    v.u32("patch", patch);
    v.u64("features", features);
    v.str("server", server);
    v.when((features & kFeatureKey) != 0, [&] { v.bytes("server_nonce", server_nonce); });
  }
};

// One element of LIST_DEVICES' reply.
struct DeviceInfo {
  std::string name;
  std::string description;
  uint32_t kind = 0;  // tensorpc::DeviceKind
  uint64_t free = 0;
  uint64_t total = 0;
  uint64_t alignment = 0;
  uint64_t max_allocation = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.str("name", name);
    v.str("description", description);
    v.u32("kind", kind, at_most(2, "not 0 (cpu), 1 (gpu) or 2 (remote)"));
    v.u64("free", free);
    v.u64("total", total);
    v.u64("alignment", alignment);
    v.u64("max_allocation", max_allocation);
  }
};
struct ListDevicesReply {
  static constexpr WireMessage wire{Command::list_devices, Direction::reply};
  std::vector<DeviceInfo> devices;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.array("count", devices, {.element = "device"});
  }
};
struct DeviceMemoryRequest {
  static constexpr WireMessage wire{Command::device_memory, Direction::request};
  uint32_t device = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("device", device);
  }
};
struct DeviceMemoryReply {
  static constexpr WireMessage wire{Command::device_memory, Direction::reply};
  uint64_t free = 0;
  uint64_t total = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("free", free);
    v.u64("total", total);
  }
};
struct BufferAllocRequest {
  static constexpr WireMessage wire{Command::buffer_alloc, Direction::request};
  uint32_t device = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("device", device);
    v.u64("size", size);
  }
};
struct BufferAllocReply {
  static constexpr WireMessage wire{Command::buffer_alloc, Direction::reply};
  uint64_t handle = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle, nonzero("which is never issued"));
  }
};
struct BufferFreeRequest {
  static constexpr WireMessage wire{Command::buffer_free, Direction::request};
  uint64_t handle = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
  }
};
struct BufferClearRequest {
  static constexpr WireMessage wire{Command::buffer_clear, Direction::request};
  uint64_t handle = 0;
  uint8_t value = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u8("value", value);
  }
};
// Followed on the wire by `size` bytes of data.
struct SetTensorRequest {
  static constexpr WireMessage wire{Command::set_tensor, Direction::request, Extent::prefix};
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u64("offset", offset);
    v.u64("size", size);
  }
};
inline constexpr size_t kSetTensorFixedSize = minimum_size_of<SetTensorRequest>();
static_assert(kSetTensorFixedSize == 24, "the wire layout of SET_TENSOR changed");
// Also each entry of SET_TENSOR_HASHES.
struct SetTensorHashRequest {
  static constexpr WireMessage wire{Command::set_tensor_hash, Direction::request};
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::array<uint8_t, 32> sha256{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u64("offset", offset);
    v.u64("size", size);
    v.bytes("sha256", sha256);
  }
};
struct SetTensorHashReply {
  static constexpr WireMessage wire{Command::set_tensor_hash, Direction::reply};
  bool found = false;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.boolean("found", found);
  }
};
// Its reply is the status followed by `size` bytes of data.
struct GetTensorRequest {
  static constexpr WireMessage wire{Command::get_tensor, Direction::request};
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u64("offset", offset);
    v.u64("size", size);
  }
};
struct CopyTensorRequest {
  static constexpr WireMessage wire{Command::copy_tensor, Direction::request};
  uint64_t src_handle = 0;
  uint64_t src_offset = 0;
  uint64_t dst_handle = 0;
  uint64_t dst_offset = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("src_handle", src_handle);
    v.u64("src_offset", src_offset);
    v.u64("dst_handle", dst_handle);
    v.u64("dst_offset", dst_offset);
    v.u64("size", size);
  }
};
// The graph itself follows the fixed fields; see graph_codec.h.
struct GraphComputeRequest {
  static constexpr WireMessage wire{Command::graph_compute, Direction::request, Extent::prefix};
  uint32_t device = 0;
  uint64_t graph_id = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("device", device);
    v.u64("graph_id", graph_id);
  }
};
struct GraphRecomputeRequest {
  static constexpr WireMessage wire{Command::graph_recompute, Direction::request};
  uint32_t device = 0;
  uint64_t graph_id = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("device", device);
    v.u64("graph_id", graph_id);
  }
};

// ---- server-to-server copies (1.1) -----------------------------------------
// A write grant: 128 random bits naming one (handle, offset, size) range of
// the granting connection's buffers, usable once.
using GrantToken = std::array<uint8_t, 16>;
struct GrantWriteRequest {
  static constexpr WireMessage wire{Command::grant_write, Direction::request};
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u64("offset", offset);
    v.u64("size", size);
  }
};
struct GrantWriteReply {
  static constexpr WireMessage wire{Command::grant_write, Direction::reply};
  GrantToken token{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bytes("token", token);
  }
};
// Sent to the source server: write [src_offset, +size) of src_handle into the
// range `token` grants on the server at `endpoint`.
struct CopyToPeerRequest {
  static constexpr WireMessage wire{Command::copy_to_peer, Direction::request};
  uint64_t src_handle = 0;
  uint64_t src_offset = 0;
  uint64_t size = 0;
  std::string endpoint;
  GrantToken token{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("src_handle", src_handle);
    v.u64("src_offset", src_offset);
    v.u64("size", size);
    v.str("endpoint", endpoint);
    v.bytes("token", token);
  }
};
// Sent by a source server to the destination; followed by `size` bytes.
struct WriteGrantedRequest {
  static constexpr WireMessage wire{Command::write_granted, Direction::request, Extent::prefix};
  GrantToken token{};
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bytes("token", token);
    v.u64("size", size);
  }
};
inline constexpr size_t kWriteGrantedFixedSize = minimum_size_of<WriteGrantedRequest>();
static_assert(kWriteGrantedFixedSize == 24, "the wire layout of WRITE_GRANTED changed");

// ---- execution plans (1.2) ----------------------------------------------------
// A standing grant: like GRANT_WRITE's, but reusable until the granting
// connection ends; each write under it counts as one arrival (WAIT_FOR).
struct GrantStandingRequest {
  static constexpr WireMessage wire{Command::grant_standing, Direction::request};
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("handle", handle);
    v.u64("offset", offset);
    v.u64("size", size);
  }
};
struct GrantStandingReply {
  static constexpr WireMessage wire{Command::grant_standing, Direction::reply};
  GrantToken token{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bytes("token", token);
  }
};
// The steps follow the fixed fields; see plan_codec.h.
struct PlanStoreRequest {
  static constexpr WireMessage wire{Command::plan_store, Direction::request, Extent::prefix};
  uint64_t plan_id = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("plan_id", plan_id);
  }
};
struct PlanRunRequest {
  static constexpr WireMessage wire{Command::plan_run, Direction::request};
  uint64_t plan_id = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u64("plan_id", plan_id);
  }
};

// ---- batched weights-cache lookups (1.5) --------------------------------------
// Many SET_TENSOR_HASH entries in one round trip. The count is bounded so a
// request stays small (4 + 4096 × 56 bytes, about 224 KiB) and a forged
// count costs nothing before its bytes arrive.
inline constexpr uint32_t kMaxHashEntries = 4096;
// The first minor version (of major 1) whose servers take SET_TENSOR_HASHES.
inline constexpr uint32_t kSetTensorHashesMinor = 5;
inline constexpr size_t kHashEntrySize = minimum_size_of<SetTensorHashRequest>();
static_assert(kHashEntrySize == 3 * 8 + 32, "the wire layout of SET_TENSOR_HASH changed");
struct SetTensorHashesRequest {
  static constexpr WireMessage wire{Command::set_tensor_hashes, Direction::request};
  std::vector<SetTensorHashRequest> entries;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.array("count", entries, {.max = kMaxHashEntries, .element = "entry"});
  }
};
// found[i]: entry i's bytes were in the cache and have been written.
struct SetTensorHashesReply {
  static constexpr WireMessage wire{Command::set_tensor_hashes, Direction::reply};
  std::vector<bool> found;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bitmap("count", "found", found, {.max = kMaxHashEntries, .element = "entry"});
  }
};

// ---- keys (1.3) ---------------------------------------------------------------
// The client's half of the handshake, after a HELLO reply with kFeatureKey.
struct AuthRequest {
  static constexpr WireMessage wire{Command::auth, Direction::request};
  AuthNonce client_nonce{};
  AuthProof client_proof{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bytes("client_nonce", client_nonce);
    v.bytes("client_proof", client_proof);
  }
};
// Sent only when the client's proof was right.
struct AuthReply {
  static constexpr WireMessage wire{Command::auth, Direction::reply};
  AuthProof server_proof{};

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bytes("server_proof", server_proof);
  }
};

// ---- which nodes a device computes (1.11) -----------------------------------
// Followed by an unplaced graph (encode_unplaced_node): a node and its sources.
struct SupportsRequest {
  static constexpr WireMessage wire{Command::supports, Direction::request, Extent::prefix};
  uint32_t device = 0;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.u32("device", device);
  }
};
// One bit per node of the graph, in its order (at most a graph's 65536
// tensors, graph_codec.h): 1 when the device computes it.
struct SupportsReply {
  static constexpr WireMessage wire{Command::supports, Direction::reply};
  std::vector<bool> computes;

  template <typename V>
  constexpr void visit_fields(V& v) {
    v.bitmap("count", "computes", computes, {.max = 65536, .element = "node"});
  }
};

// Every message, for code that treats them all alike: X(Type) for each.
#define TENSORPC_RPC_MESSAGES(X) \
  X(HelloRequest)                \
  X(HelloReply)                  \
  X(ListDevicesReply)            \
  X(DeviceMemoryRequest)         \
  X(DeviceMemoryReply)           \
  X(BufferAllocRequest)          \
  X(BufferAllocReply)            \
  X(BufferFreeRequest)           \
  X(BufferClearRequest)          \
  X(SetTensorRequest)            \
  X(SetTensorHashRequest)        \
  X(SetTensorHashReply)          \
  X(GetTensorRequest)            \
  X(CopyTensorRequest)           \
  X(GraphComputeRequest)         \
  X(GraphRecomputeRequest)       \
  X(GrantWriteRequest)           \
  X(GrantWriteReply)             \
  X(CopyToPeerRequest)           \
  X(WriteGrantedRequest)         \
  X(GrantStandingRequest)        \
  X(GrantStandingReply)          \
  X(PlanStoreRequest)            \
  X(PlanRunRequest)              \
  X(AuthRequest)                 \
  X(AuthReply)                   \
  X(SetTensorHashesRequest)      \
  X(SetTensorHashesReply)        \
  X(SupportsRequest)             \
  X(SupportsReply)

// encode writes the message's fields; decode reads exactly them from a whole
// payload (or, for a message whose wire.extent is prefix, its leading fixed
// part), failing with a Status that names the message and the first bad field.
#define TENSORPC_RPC_DECLARE_CODEC(Type)     \
  void encode(WireWriter& w, const Type& m); \
  Status decode(WireReader& r, Type& m);
TENSORPC_RPC_MESSAGES(TENSORPC_RPC_DECLARE_CODEC)
#undef TENSORPC_RPC_DECLARE_CODEC

}  // namespace tensorpc::rpc
