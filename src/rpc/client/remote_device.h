// RemoteDevice: one device of a tensorpc server, seen as a local Device.
//
// It holds only the endpoint and the device index (and, once read, the
// server's immutable facts about the device: name, description, alignment,
// largest allocation). To read memory, to allocate, or to fetch those facts
// it takes the endpoint's shared connection from get_connection() (opened
// with the key of its RemoteOptions) and lets go of it when done, so a
// RemoteDevice never keeps a socket open. The buffers and streams it creates
// hold the connection (remote_buffer.h, remote_stream.h).
//
// The Device interface returns plain values for facts and memory; when the
// server cannot be reached those are:
//   name()            "<endpoint>/device<index>" (still tells which device)
//   description()     "unreachable: <reason>"
//   memory()          {0, 0}
//   alignment()       kUnreachableAlignment (a safe power of two, never 0)
//   max_allocation()  0
// Failed facts are not cached: the next call asks again. allocate() and
// create_stream() return the error, naming the endpoint.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "rpc/wire/messages.h"
#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::rpc {

inline constexpr uint64_t kUnreachableAlignment = 256;

class RemoteDevice final : public Device {
 public:
  // `known`: the facts, when the caller already read them (connect_devices).
  RemoteDevice(std::string endpoint, uint32_t index, RemoteOptions options, std::optional<DeviceInfo> known = {});

  std::string name() const override;
  std::string description() const override;
  DeviceKind kind() const override { return DeviceKind::remote; }
  MemoryInfo memory() const override;
  uint64_t alignment() const override;
  uint64_t max_allocation() const override;
  // Every op tensorpc knows: the server validates each graph it receives.
  bool supports(const Tensor& node) const override;

  StatusOr<std::unique_ptr<Buffer>> allocate(uint64_t size) override;
  StatusOr<std::unique_ptr<Stream>> create_stream() override;
  // Plans over every device of this endpoint (remote_plan.h).
  StatusOr<std::unique_ptr<PlanRunner>> create_plan_runner() override;
  // The endpoint's connection counters (connection_stats); channel: the endpoint.
  DeviceTraffic traffic() const override;

  const std::string& endpoint() const { return endpoint_; }
  uint32_t index() const { return index_; }
  const RemoteOptions& options() const { return options_; }
  // Calls' timeout (RemoteOptions::reply_timeout), and the time to open a connection.
  std::chrono::milliseconds reply_timeout() const { return options_.reply_timeout; }
  std::chrono::milliseconds open_timeout() const;

 private:
  // The server's facts about this device, read once (LIST_DEVICES).
  StatusOr<DeviceInfo> info() const;

  const std::string endpoint_;  // canonical text form when it parses
  const uint32_t index_;
  const RemoteOptions options_;
  mutable std::mutex mutex_;                // guards info_
  mutable std::optional<DeviceInfo> info_;  // immutable once set
};

// The server's devices (LIST_DEVICES), on the endpoint's shared connection
// (opened with options.key), within options.reply_timeout.
StatusOr<std::vector<DeviceInfo>> list_devices(const std::string& endpoint, const RemoteOptions& options = {});

// The time to open a connection under `options`: reply_timeout when shorter
// than kOpenTimeout and not 0, else kOpenTimeout.
std::chrono::milliseconds open_timeout_of(const RemoteOptions& options);

}  // namespace tensorpc::rpc
