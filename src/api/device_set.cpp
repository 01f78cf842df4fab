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
  set.servers_.assign(set.owned_.size(), std::string());
  const auto has = [&](DeviceKind kind) {
    return std::any_of(set.owned_.begin(), set.owned_.end(), [&](const auto& d) { return d->kind() == kind; });
  };
  const bool helper = has(DeviceKind::gpu) && !has(DeviceKind::cpu);
  for (const std::string& endpoint : endpoints) {
    auto remote = connect_devices(endpoint, options);
    if (!remote.ok()) return remote.status().with_context("server " + endpoint);
    if (remote.value().empty()) return not_found("server " + endpoint + " has no devices");
    for (auto& d : remote.value()) {
      set.owned_.push_back(std::move(d));
      set.servers_.push_back(endpoint);
    }
    set.endpoints_.push_back(endpoint);
  }
  if (set.owned_.empty()) return invalid_argument("no devices: give --rpc servers or use a local device");
  if (helper) {
    set.owned_.push_back(std::make_unique<CpuDevice>(CpuDeviceOptions{.threads = local_threads}));
    set.servers_.emplace_back();
    set.helper_cpu_ = true;
  }
  return set;
}

Status DeviceSet::replace_server(const std::string& endpoint, const std::string& with, const RemoteOptions& options) {
  const auto at = std::find(endpoints_.begin(), endpoints_.end(), endpoint);
  if (at == endpoints_.end()) return invalid_argument("server " + endpoint + " is not one of the model's");
  std::vector<std::unique_ptr<Device>> fresh;
  if (!with.empty()) {
    auto listed = connect_devices(with, options);
    if (!listed.ok()) return listed.status().with_context("server " + with);
    if (listed.value().empty()) return not_found("server " + with + " has no devices");
    fresh = std::move(listed).value();
  }
  // The old devices' place: the run of devices the endpoint had.
  const auto first = std::find(servers_.begin(), servers_.end(), endpoint);
  const auto begin = static_cast<std::ptrdiff_t>(first - servers_.begin());
  const auto count = static_cast<std::ptrdiff_t>(std::count(servers_.begin(), servers_.end(), endpoint));
  owned_.erase(owned_.begin() + begin, owned_.begin() + begin + count);
  servers_.erase(servers_.begin() + begin, servers_.begin() + begin + count);
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(fresh.size()); ++i) {
    owned_.insert(owned_.begin() + begin + i, std::move(fresh[static_cast<size_t>(i)]));
    servers_.insert(servers_.begin() + begin + i, with);
  }
  if (with.empty()) {
    endpoints_.erase(at);
  } else {
    *at = with;
  }
  return Status();
}

Status DeviceSet::add_server(const std::string& endpoint, const RemoteOptions& options) {
  auto listed = connect_devices(endpoint, options);
  if (!listed.ok()) return listed.status().with_context("server " + endpoint);
  if (listed.value().empty()) return not_found("server " + endpoint + " has no devices");
  const auto at = static_cast<std::ptrdiff_t>(owned_.size() - (helper_cpu_ ? 1 : 0));
  for (auto& d : listed.value()) {
    const std::ptrdiff_t i = at + static_cast<std::ptrdiff_t>(&d - listed.value().data());
    owned_.insert(owned_.begin() + i, std::move(d));
    servers_.insert(servers_.begin() + i, endpoint);
  }
  endpoints_.push_back(endpoint);
  return Status();
}

std::vector<Device*> DeviceSet::devices() const {
  std::vector<Device*> out;
  for (const auto& d : owned_) out.push_back(d.get());
  return out;
}

}  // namespace tensorpc
