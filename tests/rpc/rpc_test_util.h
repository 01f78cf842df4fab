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

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rpc/messages.h"
#include "rpc/socket.h"
#include "tensorpc/status.h"

namespace tensorpc::test {

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

  Status hello(uint32_t major = rpc::kVersionMajor) {
    rpc::WireWriter w;
    rpc::HelloRequest req;
    req.major = major;
    req.client = "raw test client";
    rpc::encode(w, req);
    return call_status(rpc::Command::hello, w);
  }

  uint64_t alloc(uint64_t size, uint32_t device = 0) {
    rpc::WireWriter w;
    rpc::encode(w, rpc::BufferAllocRequest{device, size});
    auto r = call(rpc::Command::buffer_alloc, w);
    if (!r.ok() || !r.value().status.ok()) return 0;
    rpc::WireReader in = r.value().fields();
    rpc::BufferAllocReply rep;
    if (!rpc::decode(in, rep).ok()) return 0;
    return rep.handle;
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
    rpc::WireWriter w;
    rpc::encode(w, rpc::SetTensorHashRequest{handle, offset, size, digest});
    auto r = call(rpc::Command::set_tensor_hash, w);
    if (!r.ok() || !r.value().status.ok()) return -1;
    rpc::WireReader in = r.value().fields();
    rpc::SetTensorHashReply rep;
    if (!rpc::decode(in, rep).ok()) return -1;
    return rep.found ? 1 : 0;
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
