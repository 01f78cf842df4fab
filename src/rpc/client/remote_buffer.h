// RemoteBuffer: a buffer in a tensorpc server's memory.
//
// It holds a strong reference to its connection (so the socket, and the
// server's copy of the buffer, live while it does), the opaque handle the
// server issued and the size. Its bytes are not host-addressable. Sets are
// one-way (errors surface at the next synchronize); a small input's set
// (kFlagInput, at most kHeldSetBytes) is held by the connection and goes out
// in front of the next request to that server (the compute or plan run that
// reads it: Connection::send_one_way_later); large ones go through the
// server's weights cache by SHA-256 first (remote_buffer_cache.cpp), and
// set_tensors asks about 16 MiB of tensors per round trip. Gets wait and
// receive straight into the destination. The destructor frees the server's
// buffer.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "rpc/transport/connection.h"
#include "tensorpc/device.h"

namespace tensorpc::rpc {

class RemoteDeviceLink;

class RemoteBuffer final : public Buffer {
 public:
  RemoteBuffer(std::shared_ptr<const RemoteDeviceLink> device, std::shared_ptr<Connection> connection, uint64_t handle, uint64_t size);
  ~RemoteBuffer() override;

  Device& device() const override;
  uint64_t size() const override { return size_; }

  static constexpr uint64_t kHeldSetBytes = 16 << 10;
  Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) override;
  // Small tensors and inputs as set() sends them; the rest hashed (on
  // several threads when there is much to hash) unless the caller knows
  // their digest (TensorBytes::digest, filled in when it does not), the
  // server asked about them in batches of about 16 MiB to hash (the next
  // hashed while the server fills the last), and only the bytes it lacks
  // sent.
  Status set_tensors(std::span<const TensorBytes> writes) override;
  Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const override;
  // All of t, flagged SYNC: the connection's pending error instead, if any.
  Status get_after_pending(const Tensor& t, void* dst) const;
  // get_after_pending(), running `meanwhile` while the reply is on its way
  // (Connection::call_meanwhile).
  Status get_after_pending(const Tensor& t, void* dst, const std::function<void()>& meanwhile) const;
  Status synchronize() override;
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
  Status read(const Tensor& t, void* dst, uint64_t offset, uint64_t size, uint16_t flags,
              const std::function<void()>* meanwhile = nullptr) const;
  // Bytes bound for the weights cache.
  struct CachedRange {
    uint64_t server_offset = 0;
    const uint8_t* src = nullptr;
    uint64_t size = 0;
    ContentDigest* digest = nullptr;  // the caller's, used when known and filled in when not; may be null

    bool digest_known() const { return digest != nullptr && digest->known; }
  };
  // The digest of every range of `batch` into `out` (same index): the known
  // ones copied, the rest hashed and written back to the caller's
  // ContentDigest. Starts no thread when every digest is known.
  static Status digest_batch(std::span<const CachedRange> batch, std::span<std::array<uint8_t, 32>> out);
  // Whether a set of `size` bytes of t goes through the weights cache.
  bool through_cache(const Tensor& t, uint64_t size) const;
  // One SET_TENSOR frame, one-way, with these frame flags; `later`: held
  // for the connection's next request (send_one_way_later).
  Status send_set(uint64_t server_offset, const uint8_t* src, uint64_t size, uint16_t flags, bool later = false);
  // Hashes the ranges whose digest is not known and sends them in batches
  // with send_batch.
  Status set_cached(std::span<const CachedRange> ranges);
  // Asks the server about `batch` (one round trip) and sends those it lacks
  // with the CACHE flag.
  Status send_batch(std::span<const CachedRange> batch, std::span<const std::array<uint8_t, 32>> digests);
  // Which of `batch` (with these digests) the server had and wrote: one
  // SET_TENSOR_HASHES, or a SET_TENSOR_HASH each for a server older than 1.5.
  StatusOr<std::vector<bool>> ask_cache(std::span<const CachedRange> batch,
                                        std::span<const std::array<uint8_t, 32>> digests);
  Status copy_from_peer(const RemoteBuffer& src, uint64_t src_offset, uint64_t dst_offset, uint64_t size);

  const std::shared_ptr<const RemoteDeviceLink> device_;  // what it needs of its device, kept alive
  const std::shared_ptr<Connection> connection_;
  const uint64_t handle_;
  const uint64_t size_;
};

}  // namespace tensorpc::rpc
