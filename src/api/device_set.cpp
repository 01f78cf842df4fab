// Connecting the devices of a model (device_set.h).
#include "api/device_set.h"

#include <algorithm>
#include <cctype>

#include "tensorpc/cpu_device.h"
#ifdef TENSORPC_HAVE_VULKAN
#include "tensorpc/vulkan_device.h"
#endif

namespace tensorpc {
namespace {

constexpr const char* kLocalNames = "expected cpu, vulkan (every Vulkan device) or vulkan:N";

}  // namespace

Status DeviceSet::add_local(const std::string& name, int local_threads) {
  const std::string quoted = "local device '" + name + "'";
  if (name == "cpu") {
    owned_.push_back(std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = local_threads}));
    return Status();
  }
  if (name != "vulkan" && name.rfind("vulkan:", 0) != 0) return invalid_argument(quoted + ": " + kLocalNames);
#ifdef TENSORPC_HAVE_VULKAN
  int index = kEveryVulkanDevice;
  if (name != "vulkan") {
    const std::string digits = name.substr(7);
    if (digits.empty() || digits.size() > 4 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
      return invalid_argument(quoted + ": " + kLocalNames);
    }
    index = std::stoi(digits);
  }
  auto opened = open_vulkan_devices(index, 0, openings_);
  if (!opened.ok()) return opened.status().with_context(quoted);
  for (auto& device : opened.value()) owned_.push_back(std::move(device));
  return Status();
#else
  (void)local_threads;
  return unsupported(quoted + ": this build has no Vulkan device (configured without libvulkan-dev and glslc)");
#endif
}

StatusOr<DeviceSet> DeviceSet::connect(const std::vector<std::string>& local, int local_threads,
                                       const std::vector<std::string>& endpoints, const RemoteOptions& options) {
  DeviceSet set;
  for (const std::string& name : local) TENSORPC_RETURN_IF_ERROR(set.add_local(name, local_threads));
  const auto has = [&](DeviceKind kind) {
    return std::any_of(set.owned_.begin(), set.owned_.end(), [&](const auto& d) { return d->kind() == kind; });
  };
  const bool helper = has(DeviceKind::gpu) && !has(DeviceKind::cpu);
  for (const std::string& endpoint : endpoints) {
    auto remote = connect_devices(endpoint, options);
    if (!remote.ok()) return remote.status().with_context("server " + endpoint);
    if (remote.value().empty()) return not_found("server " + endpoint + " has no devices");
    for (auto& d : remote.value()) set.owned_.push_back(std::move(d));
    set.endpoints_.push_back(endpoint);
  }
  if (set.owned_.empty()) return invalid_argument("no devices: give --rpc servers or use a local device");
  if (helper) {
    set.owned_.push_back(std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = local_threads}));
    set.helper_cpu_ = true;
  }
  return set;
}

std::vector<Device*> DeviceSet::devices() const {
  std::vector<Device*> out;
  for (const auto& d : owned_) out.push_back(d.get());
  return out;
}

}  // namespace tensorpc
