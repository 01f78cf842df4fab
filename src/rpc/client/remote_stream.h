// RemoteStream: runs graphs on a device of a tensorpc server.
//
// It holds a strong reference to its connection and the device index. Graph
// runs and sets are one-way; an unchanged graph is run again by id instead of
// being resent (Connection::send_graph). synchronize() is the round trip that
// waits for everything sent on the connection so far and returns the first
// error among it — the server keeps one pending error per connection, so it
// may come from another stream or buffer on the same endpoint.
#pragma once

#include <cstdint>
#include <memory>

#include "rpc/transport/connection.h"
#include "tensorpc/device.h"

namespace tensorpc::rpc {

class RemoteDeviceLink;

class RemoteStream final : public Stream {
 public:
  RemoteStream(std::shared_ptr<const RemoteDeviceLink> device, std::shared_ptr<Connection> connection);

  Device& device() const override;
  Status compute_async(Graph& g) override;
  Status set_async(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override;
  // Completes before it returns: replies come back in order on the
  // connection, so the bytes already reflect every graph sent before.
  Status get_async(const Tensor& t, void* dst, uint64_t offset, uint64_t size) override;
  Status synchronize() override;

 private:
  // The tensor's buffer when it is a RemoteBuffer on this connection.
  StatusOr<Buffer*> buffer_of(const Tensor& t, const char* what) const;

  const std::shared_ptr<const RemoteDeviceLink> device_;  // what it needs of its device, kept alive
  const std::shared_ptr<Connection> connection_;
};

}  // namespace tensorpc::rpc
