// Device specs of the command line: `--device cpu`, `cpu:THREADS`,
// `cpu:THREADS:LIMIT` (tensorpc-server), and byte counts such as `4GiB`.
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

struct DeviceSpec {
  DeviceKind kind = DeviceKind::cpu;
  int threads = 0;            // 0: every core
  uint64_t memory_limit = 0;  // bytes; 0: none beyond the host's memory
};

// "cpu" (every core), "cpu:4" (4 threads), "cpu:4:8GiB" or "cpu::8GiB"
// (every core, an 8 GiB limit). Anything else is an invalid_argument that
// quotes the spec and says what was expected.
StatusOr<DeviceSpec> parse_device_spec(std::string_view text);

// One device per spec, named cpu0, cpu1, … in order; `pin_threads`:
// CpuDeviceOptions::pin_threads for each.
std::vector<std::shared_ptr<Device>> make_devices(const std::vector<DeviceSpec>& specs, bool pin_threads = false);

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
