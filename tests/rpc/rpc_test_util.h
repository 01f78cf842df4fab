// A raw-protocol test client: frames built by hand with the encoders of
// messages.h, sent over a plain Socket, replies read back field by field.
//
// It uses none of the client library, so server tests check the server
// against docs/protocol.md alone, and can send what no well-behaved client
// would: truncated frames, lying lengths, forged handles.
#pragma once

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rpc/wire/messages.h"
#include "rpc/transport/socket.h"
#include "tensorpc/status.h"

namespace tensorpc::test {

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct RawReply {
  rpc::FrameHeader header;
  Status status;
  std::vector<uint8_t> rest;  // the payload after the status
  rpc::WireReader fields() const { return rpc::WireReader(rest); }
};

class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    auto s = rpc::Socket::connect("127.0.0.1", port);
    if (!s.ok()) throw std::runtime_error("RawClient: " + s.status().to_string());
    socket_ = std::move(s).value();
    // A test that waits for a reply that never comes fails instead of hanging.
    timeval tv{10, 0};
    ::setsockopt(socket_.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  rpc::Socket& socket() { return socket_; }

  Status send_frame(rpc::Command c, const std::vector<uint8_t>& payload, uint16_t flags = 0) {
    return send_header(c, payload.size(), flags, payload.data(), payload.size());
  }
  Status send_frame(rpc::Command c, const rpc::WireWriter& payload, uint16_t flags = 0) {
    return send_frame(c, payload.bytes(), flags);
  }
  // A header claiming `length` payload bytes, followed by only `data`.
  Status send_header(rpc::Command c, uint64_t length, uint16_t flags = 0, const void* data = nullptr, size_t size = 0) {
    rpc::FrameHeader h;
    h.command = c;
    h.flags = flags;
    h.request_id = ++request_id_;
    h.payload_length = length;
    uint8_t raw[rpc::kFrameHeaderSize];
    rpc::encode_header(h, raw);
    const iovec parts[2] = {{raw, sizeof raw}, {const_cast<void*>(data), size}};
    return socket_.send_all(parts);
  }
  Status send_bytes(const void* data, size_t size) { return socket_.send_all(data, size); }
  // A SET_TENSOR of `size` bytes into `handle` of which only the fixed fields
  // and `sent` bytes go out: the frame is left unfinished.
  Status start_set_tensor(uint64_t handle, uint64_t size, uint64_t sent) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::SetTensorRequest{handle, 0, size});
    std::vector<uint8_t> frame = w.bytes();
    frame.resize(frame.size() + sent, 0x5a);
    return send_header(rpc::Command::set_tensor, rpc::kSetTensorFixedSize + size, 0, frame.data(), frame.size());
  }
  // Ends the connection abruptly (a reset, not a FIN), as the kernel does for
  // a process that dies with bytes unread.
  void reset() {
    const linger hard{1, 0};
    ::setsockopt(socket_.fd(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    socket_.close();
  }

  StatusOr<RawReply> read_reply() {
    uint8_t raw[rpc::kFrameHeaderSize];
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(raw, sizeof raw));
    auto h = rpc::decode_header(std::span<const uint8_t, rpc::kFrameHeaderSize>(raw, rpc::kFrameHeaderSize));
    if (!h.ok()) return h.status();
    std::vector<uint8_t> payload(h.value().payload_length);
    TENSORPC_RETURN_IF_ERROR(socket_.recv_all(payload.data(), payload.size()));
    if (h.value().request_id != request_id_) return internal_error("reply to another request");
    rpc::WireReader r(payload);
    RawReply reply;
    reply.header = h.value();
    reply.status = rpc::decode_status(r);
    const size_t used = payload.size() - r.remaining();
    reply.rest.assign(payload.begin() + static_cast<std::ptrdiff_t>(used), payload.end());
    return reply;
  }

  // Sends and reads the reply; the reply's status, or why none came.
  StatusOr<RawReply> call(rpc::Command c, const rpc::WireWriter& payload = {}) {
    TENSORPC_RETURN_IF_ERROR(send_frame(c, payload));
    return read_reply();
  }
  Status call_status(rpc::Command c, const rpc::WireWriter& payload = {}) {
    auto r = call(c, payload);
    if (!r.ok()) return r.status().with_context("no reply");
    return r.value().status;
  }
  // Sends `req` as command `c` and decodes its reply: the reply, the
  // server's error, or why no good reply came.
  template <typename Reply, typename Request>
  StatusOr<Reply> call_for(rpc::Command c, const Request& req) {
    rpc::WireWriter w;
    rpc::encode(w, req);
    auto r = call(c, w);
    if (!r.ok()) return r.status();
    if (!r.value().status.ok()) return r.value().status;
    rpc::WireReader in = r.value().fields();
    Reply reply;
    TENSORPC_RETURN_IF_ERROR(rpc::decode(in, reply));
    return reply;
  }

  Status hello(uint32_t major = rpc::kVersionMajor) {
    rpc::WireWriter w;
    rpc::HelloRequest req;
    req.major = major;
    req.client = "raw test client";
    rpc::encode(w, req);
    return call_status(rpc::Command::hello, w);
  }

  uint64_t alloc(uint64_t size, uint32_t device = 0) {
    auto rep = call_for<rpc::BufferAllocReply>(rpc::Command::buffer_alloc, rpc::BufferAllocRequest{device, size});
    return rep.ok() ? rep.value().handle : 0;
  }

  Status free(uint64_t handle) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::BufferFreeRequest{handle});
    return call_status(rpc::Command::buffer_free, w);
  }

  // SET_TENSOR: with a reply unless flags say NO_REPLY.
  Status set_tensor(uint64_t handle, uint64_t offset, const std::vector<uint8_t>& bytes, uint16_t flags = 0) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::SetTensorRequest{handle, offset, bytes.size()});
    w.raw(bytes.data(), bytes.size());
    TENSORPC_RETURN_IF_ERROR(send_frame(rpc::Command::set_tensor, w, flags));
    if (flags & rpc::kFlagNoReply) return Status();
    auto r = read_reply();
    if (!r.ok()) return r.status().with_context("no reply");
    return r.value().status;
  }

  StatusOr<std::vector<uint8_t>> get_tensor(uint64_t handle, uint64_t offset, uint64_t size, uint16_t flags = 0) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::GetTensorRequest{handle, offset, size});
    TENSORPC_RETURN_IF_ERROR(send_frame(rpc::Command::get_tensor, w, flags));
    auto r = read_reply();
    if (!r.ok()) return r.status();
    if (!r.value().status.ok()) return r.value().status;
    if (r.value().rest.size() != size) return internal_error("GET_TENSOR reply of the wrong size");
    return r.value().rest;
  }

  // SET_TENSOR_HASH: found (1) or not (0); -1 on an error.
  int set_tensor_hash(uint64_t handle, uint64_t offset, uint64_t size, const std::array<uint8_t, 32>& digest) {
    auto rep = call_for<rpc::SetTensorHashReply>(rpc::Command::set_tensor_hash,
                                                 rpc::SetTensorHashRequest{handle, offset, size, digest});
    if (!rep.ok()) return -1;
    return rep.value().found ? 1 : 0;
  }

  // SET_TENSOR_HASHES: which entries were found, or the server's error.
  StatusOr<std::vector<bool>> set_tensor_hashes(const std::vector<rpc::SetTensorHashRequest>& entries) {
    auto rep = call_for<rpc::SetTensorHashesReply>(rpc::Command::set_tensor_hashes,
                                                   rpc::SetTensorHashesRequest{entries});
    if (!rep.ok()) return rep.status();
    return std::move(rep.value().found);
  }

  Status ping() { return call_status(rpc::Command::ping); }
  Status synchronize() { return call_status(rpc::Command::synchronize); }

  // True when the server closes the connection (EOF or reset) and sends
  // nothing more than replies first.
  bool closed_by_server() {
    uint8_t b[4096];
    for (;;) {
      const ssize_t n = ::recv(socket_.fd(), b, sizeof b, 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;  // EAGAIN: the receive timeout passed
    }
  }

 private:
  rpc::Socket socket_;
  uint64_t request_id_ = 0;
};

// One tensor as docs/protocol.md lays it out, for graphs no client would send.
struct WireTensor {
  uint32_t type = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
  std::array<uint64_t, 4> nb{4, 4, 4, 4};
  uint32_t op = 0;
  std::array<int32_t, 8> params{};
  std::array<int32_t, 3> src{-1, -1, -1};
  uint32_t flags = 0;
  uint64_t handle = 0;
  uint64_t offset = 0;

  static WireTensor f32(int64_t n, uint64_t handle, uint64_t offset) { return f32_matrix(n, 1, handle, offset); }
  // A dense f32 matrix of `rows` rows of `cols` values.
  static WireTensor f32_matrix(int64_t cols, int64_t rows, uint64_t handle, uint64_t offset) {
    WireTensor t;
    t.ne = {cols, rows, 1, 1};
    const uint64_t row = static_cast<uint64_t>(cols) * 4;
    const uint64_t all = row * static_cast<uint64_t>(rows);
    t.nb = {4, row, all, all};
    t.handle = handle;
    t.offset = offset;
    return t;
  }
  void write(rpc::WireWriter& w) const {
    w.u32(type);
    for (int64_t v : ne) w.i64(v);
    for (uint64_t v : nb) w.u64(v);
    w.u32(op);
    for (int32_t v : params) w.i32(v);
    for (int32_t v : src) w.i32(v);
    w.u32(flags);
    w.u64(handle);
    w.u64(offset);
  }
};

// GRAPH_COMPUTE's payload; claimed_count: a tensor count that lies.
inline rpc::WireWriter graph_frame(const std::vector<WireTensor>& tensors, uint32_t device = 0, uint64_t graph_id = 1,
                                   std::optional<uint32_t> claimed_count = {}) {
  rpc::WireWriter w;
  rpc::encode(w, rpc::GraphComputeRequest{device, graph_id});
  w.u32(claimed_count.value_or(static_cast<uint32_t>(tensors.size())));
  for (const WireTensor& t : tensors) t.write(w);
  return w;
}

// A graph as encode_graph writes it (what Connection::send_graph takes).
inline std::vector<uint8_t> graph_bytes(const std::vector<WireTensor>& tensors) {
  rpc::WireWriter w;
  w.u32(static_cast<uint32_t>(tensors.size()));
  for (const WireTensor& t : tensors) t.write(w);
  return std::move(w.bytes());
}

// True in ASan and TSan builds, where the tests that run for a set time run
// shorter, and heavy computations are made lighter.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// How long a test that loops for a set time runs: TENSORPC_TEST_SECONDS
// when set, else `release` seconds, or `sanitized` in sanitizer builds.
inline std::chrono::milliseconds test_duration(double release, double sanitized) {
  double seconds = kSanitized ? sanitized : release;
  if (const char* env = std::getenv("TENSORPC_TEST_SECONDS")) seconds = std::atof(env);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Polls `pred` until it holds or `deadline` passes; true when it held.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace tensorpc::test
