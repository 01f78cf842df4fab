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
//   memory()          the error, naming the endpoint
//   alignment()       kUnreachableAlignment (a safe power of two, never 0)
//   max_allocation()  0
// Failed facts are not cached: the next call asks again. allocate() and
// create_stream() return the error, naming the endpoint.
//
// Buffers and streams share a RemoteDeviceLink with their device and keep it
// alive: what they need of the device (endpoint, index, options) lives there,
// so one that outlives its device still works and frees the server's bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "rpc/wire/messages.h"
#include "tensorpc/device.h"
#include "tensorpc/rpc_client.h"

namespace tensorpc::rpc {

inline constexpr uint64_t kUnreachableAlignment = 256;

class RemoteDevice;

// Where a remote device is and how to reach it, shared by the device and
// every buffer and stream it made. device() is the RemoteDevice while it
// lives. The Device contract asks callers to destroy buffers before their
// device, but a buffer kept longer must not reach freed memory: it then
// answers with a stand-in for the same endpoint and index, made once and
// kept for the process — it holds no socket (design.md: like the buffer
// types, never freed, at no cost).
class RemoteDeviceLink {
 public:
  RemoteDeviceLink(std::string endpoint, uint32_t index, RemoteOptions options)
      : endpoint_(std::move(endpoint)), index_(index), options_(std::move(options)) {}
  RemoteDeviceLink(const RemoteDeviceLink&) = delete;
  RemoteDeviceLink& operator=(const RemoteDeviceLink&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  uint32_t index() const { return index_; }
  const RemoteOptions& options() const { return options_; }
  std::chrono::milliseconds reply_timeout() const { return options_.reply_timeout; }
  Device& device() const;

 private:
  friend class RemoteDevice;
  void set_device(RemoteDevice* device);

  const std::string endpoint_;
  const uint32_t index_;
  const RemoteOptions options_;
  mutable std::mutex mutex_;       // guards device_
  RemoteDevice* device_ = nullptr;  // null once the device is destroyed
};

class RemoteDevice final : public Device {
 public:
  // `known`: the facts, when the caller already read them (connect_devices).
  RemoteDevice(std::string endpoint, uint32_t index, RemoteOptions options, std::optional<DeviceInfo> known = {});
  ~RemoteDevice() override;
  RemoteDevice(const RemoteDevice&) = delete;
  RemoteDevice& operator=(const RemoteDevice&) = delete;

  std::string name() const override;
  std::string description() const override;
  DeviceKind kind() const override { return DeviceKind::remote; }
  DeviceKind processor() const override;
  StatusOr<MemoryInfo> memory() const override;
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

  // Held by the link, which buffers and streams made for this device share.
  const std::string& endpoint() const { return link_->endpoint(); }
  uint32_t index() const { return link_->index(); }
  const RemoteOptions& options() const { return link_->options(); }
  const std::shared_ptr<RemoteDeviceLink>& link() const { return link_; }
  // Calls' timeout (RemoteOptions::reply_timeout), and the time to open a connection.
  std::chrono::milliseconds reply_timeout() const { return link_->reply_timeout(); }
  std::chrono::milliseconds open_timeout() const;

 private:
  // The server's facts about this device, read once (LIST_DEVICES).
  StatusOr<DeviceInfo> info() const;

  // SUPPORTS for `node` (a GPU of a 1.11 server), remembered per encoding.
  bool ask_supports(const Tensor& node) const;

  const std::shared_ptr<RemoteDeviceLink> link_;  // endpoint (canonical text form when it parses), index, options
  mutable std::mutex mutex_;                      // guards info_ and supports_
  mutable std::optional<DeviceInfo> info_;  // immutable once set
  // The server's answers by the node's unplaced encoding: the same
  // descriptors get the same answer, so each is asked once.
  mutable std::unordered_map<std::string, bool> supports_;
};

// The server's devices (LIST_DEVICES), on the endpoint's shared connection
// (opened with options.key), within options.reply_timeout.
StatusOr<std::vector<DeviceInfo>> list_devices(const std::string& endpoint, const RemoteOptions& options = {});

// The time to open a connection under `options`: reply_timeout when shorter
// than kOpenTimeout and not 0, else kOpenTimeout.
std::chrono::milliseconds open_timeout_of(const RemoteOptions& options);

}  // namespace tensorpc::rpc
