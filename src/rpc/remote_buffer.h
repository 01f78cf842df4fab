// RemoteBuffer: a buffer in a tensorpc server's memory.
//
// It holds a strong reference to its connection (so the socket, and the
// server's copy of the buffer, live while it does), the opaque handle the
// server issued and the size. Its bytes are not host-addressable. Sets are
// one-way (errors surface at the next synchronize); large ones go through the
// server's weights cache by SHA-256 first. Gets wait and receive straight into
// the destination. The destructor frees the server's buffer.
#pragma once

#include <cstdint>
#include <memory>

#include "rpc/connection.h"
#include "tensorpc/device.h"

namespace tensorpc::rpc {

class RemoteDevice;

class RemoteBuffer final : public Buffer {
 public:
  RemoteBuffer(RemoteDevice& device, std::shared_ptr<Connection> connection, uint64_t handle, uint64_t size);
  ~RemoteBuffer() override;

  Device& device() const override;
  uint64_t size() const override { return size_; }

  Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override;
  Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const override;
  // All of t, flagged SYNC: the connection's pending error instead, if any.
  Status get_after_pending(const Tensor& t, void* dst) const;
  Status clear(uint8_t value) override;
  // From a RemoteBuffer on the same connection: on the server (COPY_TENSOR,
  // one-way). From a RemoteBuffer of another server: server to server (a
  // write grant from this server, then COPY_TO_PEER to the source's), and it
  // returns once the bytes are written. From host memory: a set. Anything
  // else: unsupported.
  Status copy(const Tensor& src, const Tensor& dst) override;

  uint64_t handle() const { return handle_; }
  const std::shared_ptr<Connection>& connection() const { return connection_; }

 private:
  // GET_TENSOR of [offset, +size) of t with these frame flags.
  Status read(const Tensor& t, void* dst, uint64_t offset, uint64_t size, uint16_t flags) const;
  // Sends [server_offset, +size) through the weights cache: the hash, then the
  // bytes only if the server lacks them.
  Status set_cached(uint64_t server_offset, const uint8_t* src, uint64_t size);
  Status copy_from_peer(const RemoteBuffer& src, uint64_t src_offset, uint64_t dst_offset, uint64_t size);

  RemoteDevice& device_;
  const std::shared_ptr<Connection> connection_;
  const uint64_t handle_;
  const uint64_t size_;
};

}  // namespace tensorpc::rpc
