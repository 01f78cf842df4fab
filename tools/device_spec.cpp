// Parsing of device specs and byte counts (device_spec.h).
#include "device_spec.h"

#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <utility>

#include "cli_checks.h"
#include "tensorpc/cpu_device.h"
#ifdef TENSORPC_HAVE_VULKAN
#include "tensorpc/vulkan_device.h"
#endif

namespace tensorpc::tools {

bool parse_byte_count(std::string_view text, uint64_t& out) {
  const std::string s(text);
  if (s.empty() || !(std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '.')) return false;
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!suffix.empty() && suffix.back() == 'b') suffix.pop_back();
  static const std::pair<const char*, double> kScales[] = {
      {"", 1},           {"k", 1e3},           {"m", 1e6},
      {"g", 1e9},        {"t", 1e12},          {"ki", 1024.0},
      {"mi", 1048576.0}, {"gi", 1073741824.0}, {"ti", 1099511627776.0},
  };
  double scale = 0;
  for (const auto& [name, factor] : kScales)
    if (suffix == name) scale = factor;
  if (scale == 0) return false;
  const double bytes = value * scale;
  if (!(bytes >= 0) || bytes >= 1.8e19) return false;
  out = static_cast<uint64_t>(bytes);
  return true;
}

namespace {

#ifdef TENSORPC_HAVE_VULKAN
constexpr const char* kKinds = "cpu, vulkan";
#else
constexpr const char* kKinds = "cpu";
#endif

// The Vulkan devices `spec` names, opened.
Status open_vulkan(const DeviceSpec& spec, std::map<int, int>& openings,
                   std::vector<std::shared_ptr<Device>>& devices) {
#ifdef TENSORPC_HAVE_VULKAN
  static_assert(kEveryVulkanDevice == tensorpc::kEveryVulkanDevice);
  TENSORPC_ASSIGN_OR_RETURN(auto opened, open_vulkan_devices(spec.index, spec.memory_limit, openings));
  for (auto& device : opened) devices.push_back(std::move(device));
  return Status();
#else
  (void)spec, (void)openings, (void)devices;
  return unsupported("this build has no Vulkan device (configured without libvulkan-dev and glslc)");
#endif
}

}  // namespace

StatusOr<DeviceSpec> parse_device_spec(std::string_view text) {
  const std::string quoted = "device spec '" + std::string(text) + "'";
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? std::string_view::npos : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  const bool vulkan = parts[0] == "vulkan";
  const std::string expected = vulkan ? ": expected vulkan, vulkan:INDEX or vulkan:INDEX:LIMIT (e.g. vulkan:0:8GiB)"
                                      : ": expected cpu, cpu:THREADS or cpu:THREADS:LIMIT (e.g. cpu:4:8GiB)";
  if (parts.size() > 3) return invalid_argument(quoted + " has too many parts" + expected);
  if (parts[0] != "cpu" && !vulkan) {
    return invalid_argument(quoted + ": unknown device kind '" + std::string(parts[0]) +
                            "' (this build serves: " + kKinds + ")" + expected);
  }
#ifndef TENSORPC_HAVE_VULKAN
  if (vulkan) {
    return invalid_argument(quoted +
                            ": this build has no Vulkan device (configured without libvulkan-dev and "
                            "glslc, or with -DTENSORPC_VULKAN=OFF)");
  }
#endif
  DeviceSpec spec{.kind = vulkan ? DeviceKind::gpu : DeviceKind::cpu};
  const char* what = vulkan ? "index " : "threads ";
  if (parts.size() >= 2 && !parts[1].empty()) {
    const std::optional<int64_t> n = parse_whole_number(parts[1], vulkan ? 0 : 1, kMaxDeviceThreads);
    if (!n) {
      return invalid_argument(quoted + ": " + what +
                              not_a_whole_number(parts[1], vulkan ? "0" : "1", kMaxDeviceThreads) + expected);
    }
    (vulkan ? spec.index : spec.threads) = static_cast<int>(*n);
  }
  if (parts.size() == 3) {
    if (!parse_byte_count(parts[2], spec.memory_limit) || spec.memory_limit == 0) {
      return invalid_argument(quoted + ": memory limit '" + std::string(parts[2]) +
                              "' is not a positive byte count (e.g. 512MiB, 4GiB, 8G)" + expected);
    }
  } else if (parts.size() == 2 && parts[1].empty()) {
    return invalid_argument(quoted + ": empty " + (vulkan ? "index" : "threads") + expected);
  }
  return spec;
}

StatusOr<std::vector<std::shared_ptr<Device>>> make_devices(const std::vector<DeviceSpec>& specs, bool pin_threads) {
  // Pinned devices of as many threads share them: they would take turns on
  // the same cores anyway.
  std::map<int, std::shared_ptr<cpu::ThreadPool>> pinned;
  std::map<int, int> openings;  // of each Vulkan device
  std::vector<std::shared_ptr<Device>> devices;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].kind == DeviceKind::gpu) {
      Status s = open_vulkan(specs[i], openings, devices);
      if (!s.ok()) {
        const std::string spec =
            specs[i].index == kEveryVulkanDevice ? "vulkan" : "vulkan:" + std::to_string(specs[i].index);
        return s.with_context("--device " + spec);
      }
      continue;
    }
    CpuDeviceOptions o{.name = "cpu" + std::to_string(i),
                       .threads = specs[i].threads,
                       .memory_limit = specs[i].memory_limit,
                       .pin_threads = pin_threads};
    if (pin_threads) {
      auto& shared = pinned[specs[i].threads];
      if (!shared) shared = CpuDevice::shared_threads(specs[i].threads, true);
      o.shared_threads = shared;
    }
    devices.push_back(std::make_shared<CpuDevice>(std::move(o)));
  }
  return devices;
}

std::string check_thread_count(std::string_view text) {
  if (parse_whole_number(text, 0, kMaxDeviceThreads)) return {};
  return not_a_whole_number(text, "0 (every core)", kMaxDeviceThreads);
}

}  // namespace tensorpc::tools
