// Connecting the devices of a model (device_set.h).
#include "api/device_set.h"

#include "tensorpc/cpu_device.h"

namespace tensorpc {

StatusOr<DeviceSet> DeviceSet::connect(bool use_local, int local_threads, const std::vector<std::string>& endpoints,
                                       const RemoteOptions& options) {
  DeviceSet set;
  if (use_local) set.owned_.push_back(std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = local_threads}));
  for (const std::string& endpoint : endpoints) {
    auto remote = connect_devices(endpoint, options);
    if (!remote.ok()) return remote.status().with_context("server " + endpoint);
    if (remote.value().empty()) return not_found("server " + endpoint + " has no devices");
    for (auto& d : remote.value()) set.owned_.push_back(std::move(d));
    set.endpoints_.push_back(endpoint);
  }
  if (set.owned_.empty()) return invalid_argument("no devices: give --rpc servers or use the local CPU");
  return set;
}

std::vector<Device*> DeviceSet::devices() const {
  std::vector<Device*> out;
  for (const auto& d : owned_) out.push_back(d.get());
  return out;
}

}  // namespace tensorpc
