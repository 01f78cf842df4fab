// RemoteStream: graphs encoded and sent (or referred to by id), one-way
// sets, and the SYNCHRONIZE round trip.
#include "rpc/client/remote_stream.h"

#include <algorithm>

#include "rpc/wire/graph_codec.h"
#include "rpc/client/remote_buffer.h"
#include "rpc/client/remote_device.h"

namespace tensorpc::rpc {

RemoteStream::RemoteStream(std::shared_ptr<const RemoteDeviceLink> device, std::shared_ptr<Connection> connection)
    : device_(std::move(device)), connection_(std::move(connection)) {}

Device& RemoteStream::device() const { return device_->device(); }

Status RemoteStream::compute_async(Graph& g) {
  const Connection* mine = connection_.get();
  WireWriter w;
  std::vector<uint64_t> handles;
  // 0 (refused by encode_graph) for anything not in a buffer of this
  // connection: the server could not name those bytes.
  const Status s = encode_graph(w, g, [mine, &handles](const Buffer* b) -> uint64_t {
    const auto* remote = dynamic_cast<const RemoteBuffer*>(b);
    if (remote == nullptr || remote->connection().get() != mine) return 0;
    if (std::find(handles.begin(), handles.end(), remote->handle()) == handles.end()) {
      handles.push_back(remote->handle());
    }
    return remote->handle();
  });
  if (!s.ok()) {
    return Status(s.code(), "GRAPH_COMPUTE to " + connection_->endpoint() + ": " + s.message() +
                                " (every tensor must be in a buffer of this endpoint's live connection)");
  }
  return connection_->send_graph(device_->index(), std::move(w.bytes()), std::move(handles), device_->reply_timeout());
}

StatusOr<Buffer*> RemoteStream::buffer_of(const Tensor& t, const char* what) const {
  const auto* remote = dynamic_cast<const RemoteBuffer*>(t.buffer);
  if (remote == nullptr || remote->connection() != connection_) {
    return invalid_argument(std::string(what) + ": " + describe(t) + " is not in a buffer of " +
                            connection_->endpoint() + " on this stream's connection");
  }
  return t.buffer;
}

Status RemoteStream::set_async(const Tensor& t, const void* src, uint64_t offset, uint64_t size) {
  auto buffer = buffer_of(t, "set_async");
  if (!buffer.ok()) return buffer.status();
  return buffer.value()->set(t, src, offset, size);
}

Status RemoteStream::get_async(const Tensor& t, void* dst, uint64_t offset, uint64_t size) {
  auto buffer = buffer_of(t, "get_async");
  if (!buffer.ok()) return buffer.status();
  return buffer.value()->get(t, dst, offset, size);
}

Status RemoteStream::synchronize() {
  return connection_->call_status_only(Command::synchronize, {}, device_->reply_timeout());
}

}  // namespace tensorpc::rpc
