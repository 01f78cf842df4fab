// Device specs of the command line: `--device cpu`, `cpu:THREADS`,
// `cpu:THREADS:LIMIT`, `vulkan`, `vulkan:INDEX`, `vulkan:INDEX:LIMIT`
// (tensorpc-server), and byte counts such as `4GiB`.
//
// Kept apart from the tools' main() so that tests can check the parsing, and
// so that every tool reads sizes the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensorpc/device.h"
#include "tensorpc/status.h"

namespace tensorpc::tools {

inline constexpr int kMaxDeviceThreads = 4096;

inline constexpr int kEveryVulkanDevice = -1;

struct DeviceSpec {
  DeviceKind kind = DeviceKind::cpu;  // cpu, or gpu for a Vulkan device
  int threads = 0;                    // cpu: threads, 0: every core
  int index = kEveryVulkanDevice;     // gpu: the Vulkan device's index, or every one
  uint64_t memory_limit = 0;          // bytes; 0: none beyond the device's memory
};

// "cpu" (every core), "cpu:4" (4 threads), "cpu:4:8GiB" or "cpu::8GiB"
// (every core, an 8 GiB limit); "vulkan" (every Vulkan device), "vulkan:0"
// (the first), "vulkan:0:8GiB" or "vulkan::8GiB" (each with an 8 GiB
// limit). Anything else is an invalid_argument that quotes the spec and
// says what was expected; so is a Vulkan spec in a build without Vulkan.
StatusOr<DeviceSpec> parse_device_spec(std::string_view text);

// The devices of the specs, in order: one per cpu spec, named cpuI (I its
// place in the list), with CpuDeviceOptions::pin_threads from `pin_threads`;
// one per Vulkan device a vulkan spec names, named vulkan:N, or vulkan:N#K
// when it is the K-th opening of device N. Fails naming the spec (and what
// is missing: a Vulkan driver, the device) when a Vulkan device cannot be
// opened.
StatusOr<std::vector<std::shared_ptr<Device>>> make_devices(const std::vector<DeviceSpec>& specs,
                                                            bool pin_threads = false);

// "4GiB", "512M", "1.5G", "1024": bytes. k/M/G/T are powers of 1000,
// KiB/MiB/GiB/TiB powers of 1024; a trailing "B" and the case of the letters
// do not matter ("4gib", "4GB"). False on anything else, or on a value that
// does not fit in 64 bits.
bool parse_byte_count(std::string_view text, uint64_t& out);

// A `-t/--threads` value: a whole number from 0 (every core) to
// kMaxDeviceThreads. Returns "" when it is one, else what is wrong (for a
// CLI11 check).
std::string check_thread_count(std::string_view text);

}  // namespace tensorpc::tools
