// The device interface: Device, Buffer and Stream.
//
// A Device describes one place that can hold bytes and compute (the local
// CPU, a GPU, a device of a remote server). It allocates Buffers and creates
// Streams. A Buffer is a block of device memory of a fixed size; tensors are
// placed into it at offsets and their bytes are set, read, cleared and copied
// through it. A Stream executes graphs whose tensors live in buffers of its
// device, in order; its *_async calls may return before the work is done and
// synchronize() waits for all of it, surfacing the first error.
//
// Ownership: the caller owns Buffers and Streams (unique_ptr) and must keep a
// buffer alive while tensors placed in it are in use. A Device outlives its
// buffers and streams.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorpc/execution_plan.h"
#include "tensorpc/graph.h"
#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

class Device;

enum class DeviceKind { cpu, gpu, remote };
const char* to_string(DeviceKind kind);

struct MemoryInfo {
  uint64_t free = 0;
  uint64_t total = 0;
};

// What went through the connection a device is reached by, since that
// connection opened. Devices reached through one connection (the devices of
// one server) report the same `channel` and the same counters, so a reader
// sums each channel once. Local devices: an empty channel and zeros.
struct DeviceTraffic {
  std::string channel;  // names the connection (a remote device: its endpoint)
  uint64_t round_trips = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// The SHA-256 of a tensor's bytes, for callers that load the same bytes again.
struct ContentDigest {
  bool known = false;
  std::array<uint8_t, 32> sha256{};
};

// All the bytes of one tensor, for Buffer::set_tensors: tensor->nbytes()
// bytes at data.
//
// `digest`, when not null, is the SHA-256 of those bytes, in and out. A
// buffer that hashes what it is given (a remote buffer, for its server's
// weights cache) uses a known digest instead of hashing the bytes, and fills
// in (and sets `known` on) the ones it computes; other buffers, and tensors a
// remote buffer sends without the cache (small ones, inputs), leave it as it
// is. A known digest that does not match the bytes makes the server fill the
// tensor with whatever it holds under that digest: the caller's own loss
// only, since a server caches only bytes it hashed itself, so no client can
// change what another one loads.
struct TensorBytes {
  const Tensor* tensor = nullptr;
  const void* data = nullptr;
  ContentDigest* digest = nullptr;
};

class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  virtual Device& device() const = 0;
  virtual uint64_t size() const = 0;
  // Host address of byte 0 when the bytes are host-addressable, else null.
  virtual void* host_base() const { return nullptr; }

  // Bytes [offset, offset + size) of tensor t's storage. t must be placed in
  // this buffer and the range must lie within t.
  virtual Status set(const Tensor& t, const void* src, uint64_t offset, uint64_t size) = 0;
  virtual Status get(const Tensor& t, void* dst, uint64_t offset, uint64_t size) const = 0;
  // Every tensor's whole bytes, as set() of each would write them. The
  // tensors (placed in this buffer) must not overlap: the order in which
  // they land is the device's. This one calls set() for each in turn; a
  // remote buffer asks its server's weights cache about many per round trip
  // and sends only the bytes the server lacks. Stops at the first error,
  // which may leave the tensors before it written.
  virtual Status set_tensors(std::span<const TensorBytes> writes);
  // Returns when every set() and set_tensors() before it has landed, with
  // the first error among them. A remote buffer's sets are one-way, so this
  // is a round trip (SYNCHRONIZE); its server then also holds their bytes in
  // its weights cache. A local buffer's sets are done when they return.
  virtual Status synchronize() { return Status(); }
  // Every byte of the buffer set to `value`.
  virtual Status clear(uint8_t value) = 0;
  // dst's bytes (dst placed in this buffer) become src's; same nbytes.
  // Devices may refuse sources they cannot reach (unsupported); callers then
  // copy through the host.
  virtual Status copy(const Tensor& src, const Tensor& dst) = 0;

  // Binds t (not a view) to bytes [offset, offset + t.nbytes()) of this
  // buffer, and updates nothing else. Fails if it does not fit or is
  // misaligned for the device.
  Status place(Tensor& t, uint64_t offset);
  // Binds a view to the bytes of its view_src (which must be placed).
  static Status place_view(Tensor& view);

  // Checks that t is placed in this buffer and [offset, offset+size) lies in it.
  Status check_range(const Tensor& t, uint64_t offset, uint64_t size, const char* what) const;

 protected:
  Buffer() = default;
};

class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  virtual Device& device() const = 0;

  // Runs the nodes of g in order. Every node's tensor (and every source) must
  // be placed in a buffer of this stream's device.
  virtual Status compute_async(Graph& g) = 0;
  virtual Status set_async(const Tensor& t, const void* src, uint64_t offset, uint64_t size) = 0;
  // dst must stay valid until synchronize() returns.
  virtual Status get_async(const Tensor& t, void* dst, uint64_t offset, uint64_t size) = 0;
  // Waits for everything issued so far; returns the first error among it.
  virtual Status synchronize() = 0;

  // compute_async + synchronize; the first error of either, reported by this call alone.
  Status compute(Graph& g);

 protected:
  Stream() = default;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual DeviceKind kind() const = 0;
  // What computes its nodes: kind() for a local device; for a remote one
  // its server's device's kind (remote where the server cannot tell).
  virtual DeviceKind processor() const { return kind(); }
  // Free and total bytes now; an error when the device cannot tell (a
  // remote device whose server does not answer), never a made-up figure.
  virtual StatusOr<MemoryInfo> memory() const = 0;
  // Every placement offset in a buffer of this device is a multiple of this.
  virtual uint64_t alignment() const = 0;
  virtual uint64_t max_allocation() const = 0;
  // True when this device can compute node (its op, types and layout).
  virtual bool supports(const Tensor& node) const = 0;

  virtual StatusOr<std::unique_ptr<Buffer>> allocate(uint64_t size) = 0;
  virtual StatusOr<std::unique_ptr<Stream>> create_stream() = 0;

  // Traffic of the connection behind this device; zeros for a local one.
  virtual DeviceTraffic traffic() const { return {}; }

  // A runner of execution plans on the server behind this device, whose
  // steps may use any device reached through the same connection (the same
  // DeviceTraffic::channel). Devices that run each graph themselves (local
  // ones) answer unsupported, and callers run split by split instead.
  virtual StatusOr<std::unique_ptr<PlanRunner>> create_plan_runner() {
    return unsupported(name() + ": runs no execution plans");
  }

 protected:
  Device() = default;
};

// Reads a tensor's values as f32 (any type, any layout) through its buffer;
// for tests, tools and debugging.
StatusOr<std::vector<float>> read_as_f32(const Tensor& t);
// Writes f32 values into a tensor (converted to its type; t must be contiguous).
Status write_from_f32(Tensor& t, const std::vector<float>& values);

}  // namespace tensorpc
