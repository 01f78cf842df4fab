// The frames and messages of the wire protocol (docs/protocol.md).
//
// One request struct and one reply struct per command, each with its encoder
// and decoder next to each other. Encoders write the payload (not the frame
// header); decoders read a whole payload and fail — returning a Status that
// names the command and the field — on truncation, trailing bytes, or a value
// out of range. Bulk bytes (SET_TENSOR's and WRITE_GRANTED's data,
// GET_TENSOR's reply data) are not part of these structs: they travel
// straight between the socket and the caller's memory, after the fixed fields.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rpc/wire/wire.h"
#include "tensorpc/status.h"

namespace tensorpc::rpc {

inline constexpr uint32_t kVersionMajor = 1;
// 1.1: server-to-server copies; 1.2: execution plans; 1.3: keys, the SYNC flag;
// 1.4: one-way SEND_TO_PEER in plans; 1.5: SET_TENSOR_HASHES; 1.6: the top_k op;
// 1.7: set_rows into a strided (transposed) destination; 1.8: tanh, rope with
// frequency factors and YaRN
inline constexpr uint32_t kVersionMinor = 8;
// The first minor version (of major 1) whose servers compute Op::top_k.
inline constexpr uint32_t kTopKMinor = 6;
// The first whose servers take set_rows with a strided destination.
inline constexpr uint32_t kStridedSetRowsMinor = 7;
// tanh, and rope with frequency factors or YaRN: from 1.8.
inline constexpr uint32_t kRopeTanhMinor = 8;
inline constexpr uint32_t kVersionPatch = 0;
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
};
inline constexpr uint16_t kCommandCount = 22;
const char* name_of(Command c);

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
// HELLO's feature bits (1.3). kFeatureKey in a request: the client holds a
// key and will prove it; in a reply: the server holds one, and its nonce
// follows the reply's other fields (docs/protocol.md, "Keys").
inline constexpr uint64_t kFeatureKey = uint64_t{1} << 0;
inline constexpr size_t kAuthNonceSize = 32;
inline constexpr size_t kAuthProofSize = 32;  // an HMAC-SHA-256
using AuthNonce = std::array<uint8_t, kAuthNonceSize>;
using AuthProof = std::array<uint8_t, kAuthProofSize>;

struct HelloRequest {
  uint32_t major = kVersionMajor, minor = kVersionMinor, patch = kVersionPatch;
  uint64_t features = 0;
  std::string client;
};
// The largest HELLO request: its fixed fields and the longest string.
inline constexpr size_t kMaxHelloRequestSize = 3 * 4 + 8 + 4 + kMaxWireString;
struct HelloReply {
  uint32_t major = kVersionMajor, minor = kVersionMinor, patch = kVersionPatch;
  uint64_t features = 0;
  std::string server;
  AuthNonce server_nonce{};  // on the wire only when features has kFeatureKey
};

struct DeviceInfo {
  std::string name;
  std::string description;
  uint32_t kind = 0;  // tensorpc::DeviceKind
  uint64_t free = 0;
  uint64_t total = 0;
  uint64_t alignment = 0;
  uint64_t max_allocation = 0;
};
struct ListDevicesReply {
  std::vector<DeviceInfo> devices;
};
struct DeviceMemoryRequest {
  uint32_t device = 0;
};
struct DeviceMemoryReply {
  uint64_t free = 0;
  uint64_t total = 0;
};
struct BufferAllocRequest {
  uint32_t device = 0;
  uint64_t size = 0;
};
struct BufferAllocReply {
  uint64_t handle = 0;
};
struct BufferFreeRequest {
  uint64_t handle = 0;
};
struct BufferClearRequest {
  uint64_t handle = 0;
  uint8_t value = 0;
};
// Followed on the wire by `size` bytes of data.
struct SetTensorRequest {
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
inline constexpr size_t kSetTensorFixedSize = 24;
struct SetTensorHashRequest {
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::array<uint8_t, 32> sha256{};
};
struct SetTensorHashReply {
  bool found = false;
};
// Its reply is the status followed by `size` bytes of data.
struct GetTensorRequest {
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
struct CopyTensorRequest {
  uint64_t src_handle = 0;
  uint64_t src_offset = 0;
  uint64_t dst_handle = 0;
  uint64_t dst_offset = 0;
  uint64_t size = 0;
};
// The graph itself follows the fixed fields; see graph_codec.h.
struct GraphComputeRequest {
  uint32_t device = 0;
  uint64_t graph_id = 0;
};
struct GraphRecomputeRequest {
  uint32_t device = 0;
  uint64_t graph_id = 0;
};

// ---- server-to-server copies (1.1) -----------------------------------------
// A write grant: 128 random bits naming one (handle, offset, size) range of
// the granting connection's buffers, usable once.
using GrantToken = std::array<uint8_t, 16>;
struct GrantWriteRequest {
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
struct GrantWriteReply {
  GrantToken token{};
};
// Sent to the source server: write [src_offset, +size) of src_handle into the
// range `token` grants on the server at `endpoint`.
struct CopyToPeerRequest {
  uint64_t src_handle = 0;
  uint64_t src_offset = 0;
  uint64_t size = 0;
  std::string endpoint;
  GrantToken token{};
};
// Sent by a source server to the destination; followed by `size` bytes.
struct WriteGrantedRequest {
  GrantToken token{};
  uint64_t size = 0;
};
inline constexpr size_t kWriteGrantedFixedSize = 24;

// ---- execution plans (1.2) ----------------------------------------------------
// A standing grant: like GRANT_WRITE's, but reusable until the granting
// connection ends; each write under it counts as one arrival (WAIT_FOR).
struct GrantStandingRequest {
  uint64_t handle = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
struct GrantStandingReply {
  GrantToken token{};
};
// The steps follow the fixed fields; see plan_codec.h.
struct PlanStoreRequest {
  uint64_t plan_id = 0;
};
struct PlanRunRequest {
  uint64_t plan_id = 0;
};

// ---- batched weights-cache lookups (1.5) --------------------------------------
// Many SET_TENSOR_HASH entries in one round trip. The count is bounded so a
// request stays small (4 + 4096 × 56 bytes, about 224 KiB) and a forged
// count costs nothing before its bytes arrive.
inline constexpr uint32_t kMaxHashEntries = 4096;
// The first minor version (of major 1) whose servers take SET_TENSOR_HASHES.
inline constexpr uint32_t kSetTensorHashesMinor = 5;
inline constexpr size_t kHashEntrySize = 3 * 8 + 32;
struct SetTensorHashesRequest {
  std::vector<SetTensorHashRequest> entries;
};
// found[i]: entry i's bytes were in the cache and have been written. On the
// wire: u32 count, then a bitmap of (count + 7) / 8 bytes, entry i in bit
// i % 8 of byte i / 8, the unused high bits of the last byte 0.
struct SetTensorHashesReply {
  std::vector<bool> found;
};

// ---- keys (1.3) ---------------------------------------------------------------
// The client's half of the handshake, after a HELLO reply with kFeatureKey.
struct AuthRequest {
  AuthNonce client_nonce{};
  AuthProof client_proof{};
};
// Sent only when the client's proof was right.
struct AuthReply {
  AuthProof server_proof{};
};

// encode_X writes the message's fields; decode_X reads exactly them from a
// whole payload (or, for SET_TENSOR, GRAPH_COMPUTE and WRITE_GRANTED, its leading
// fixed part)
#define TENSORPC_RPC_MESSAGE(Type)           \
  void encode(WireWriter& w, const Type& m); \
  Status decode(WireReader& r, Type& m);
TENSORPC_RPC_MESSAGE(HelloRequest)
TENSORPC_RPC_MESSAGE(HelloReply)
TENSORPC_RPC_MESSAGE(ListDevicesReply)
TENSORPC_RPC_MESSAGE(DeviceMemoryRequest)
TENSORPC_RPC_MESSAGE(DeviceMemoryReply)
TENSORPC_RPC_MESSAGE(BufferAllocRequest)
TENSORPC_RPC_MESSAGE(BufferAllocReply)
TENSORPC_RPC_MESSAGE(BufferFreeRequest)
TENSORPC_RPC_MESSAGE(BufferClearRequest)
TENSORPC_RPC_MESSAGE(SetTensorRequest)
TENSORPC_RPC_MESSAGE(SetTensorHashRequest)
TENSORPC_RPC_MESSAGE(SetTensorHashReply)
TENSORPC_RPC_MESSAGE(GetTensorRequest)
TENSORPC_RPC_MESSAGE(CopyTensorRequest)
TENSORPC_RPC_MESSAGE(GraphComputeRequest)
TENSORPC_RPC_MESSAGE(GraphRecomputeRequest)
TENSORPC_RPC_MESSAGE(GrantWriteRequest)
TENSORPC_RPC_MESSAGE(GrantWriteReply)
TENSORPC_RPC_MESSAGE(CopyToPeerRequest)
TENSORPC_RPC_MESSAGE(WriteGrantedRequest)
TENSORPC_RPC_MESSAGE(GrantStandingRequest)
TENSORPC_RPC_MESSAGE(GrantStandingReply)
TENSORPC_RPC_MESSAGE(PlanStoreRequest)
TENSORPC_RPC_MESSAGE(PlanRunRequest)
TENSORPC_RPC_MESSAGE(AuthRequest)
TENSORPC_RPC_MESSAGE(AuthReply)
TENSORPC_RPC_MESSAGE(SetTensorHashesRequest)
TENSORPC_RPC_MESSAGE(SetTensorHashesReply)
#undef TENSORPC_RPC_MESSAGE

}  // namespace tensorpc::rpc
