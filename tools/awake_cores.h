// Keeping idle cores awake for the length of a process: a request to the
// kernel's CPU latency QoS (/dev/cpu_dma_latency) for wake-ups of 0 µs, so
// an idle core polls instead of halting. A message to a thread whose core is
// idle then wakes it in microseconds: on a virtual machine, waking a halted
// virtual CPU goes through the hypervisor and costs tens of microseconds
// (`bench/wakeup_bench`; docs/performance.md). The price is power, and on a
// virtual machine the host's time that polling cores take.
//
// The request holds while the file stays open and ends when it closes — on
// destruction, or with the process, however it ends. It applies to every core
// of the machine, whichever process makes it; the kernel honours the lowest
// of all requests. Making one needs write access to the file (root).
#pragma once

#include <optional>
#include <string>

#include "tensorpc/status.h"

namespace tensorpc::tools {

inline constexpr const char* kCpuLatencyPath = "/dev/cpu_dma_latency";

class AwakeCores {
 public:
  // Asks for wake-ups of 0 µs through `path` (the kernel's file; tests give
  // another); an error names the file and why it could not be asked.
  static StatusOr<AwakeCores> request(const std::string& path = kCpuLatencyPath);
  // For a flag: request(path) when a path is given, none when it is empty.
  static StatusOr<std::optional<AwakeCores>> request_if(const std::string& path);

  AwakeCores(AwakeCores&& other) noexcept;
  AwakeCores& operator=(AwakeCores&& other) noexcept;
  AwakeCores(const AwakeCores&) = delete;
  AwakeCores& operator=(const AwakeCores&) = delete;
  ~AwakeCores();

 private:
  explicit AwakeCores(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// The help text of the flags that make the request (`--awake-cores`).
inline constexpr const char* kAwakeCoresHelp =
    "keep idle cores polling instead of sleeping while this runs (a 0 us CPU latency request on "
    "/dev/cpu_dma_latency, which must be writable: root, or see docs/server.md): a message wakes its "
    "thread in microseconds instead of tens, at the cost of power";

}  // namespace tensorpc::tools
