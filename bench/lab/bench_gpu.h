// The GPU figures of `tensorpc bench`: for each local Vulkan device, the
// matrix products of a transformer's weights against the ceilings of that
// device, each ceiling measured in the same run.
//
// - "gpu.<device>.decode.<type>": weight bytes read per second of a
//   matrix-vector product (N = 1) of a dim × dim weight (4096 × 4096 in a
//   full run) in f16, q8_0 and q4_K, against the bytes read per second of a
//   copy between two device-local buffers on the device.
// - "gpu.<device>.prefill.<type>": GFLOP/s (2 per multiply-add) of the same
//   weight times N = 512 tokens, in f16 and q8_0, against the device's peak:
//   a shader of nothing but independent fused multiply-adds on registers.
//
// Each time is the median of several repetitions after a warm-up, each
// waited for (Stream::synchronize). No targets: the goal is a ratio
// to the reference runtime's Vulkan backend on the same GPU
// (docs/performance.md), which this run does not measure.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "lab/bench_report.h"

namespace tensorpc::tools {

struct GpuBenchOptions {
  int repetitions = 5;
  int64_t dim = 4096;  // the weights are dim × dim
  int64_t prefill_tokens = 512;
  uint64_t copy_bytes = uint64_t{512} << 20;  // bytes each timed copy reads (at most half the largest allocation)
  // Vulkan devices by index (as `--device vulkan:N` names them); empty: every one.
  std::vector<int> devices{};
};

// True when the Vulkan loader reports at least one device (false in builds
// without the Vulkan device).
bool gpu_devices_present();

// The figures above for each device of options.devices; an error naming
// what is missing when there is no Vulkan device (or no Vulkan build).
StatusOr<std::vector<Figure>> bench_gpu_devices(const GpuBenchOptions& options, std::FILE* progress);

}  // namespace tensorpc::tools
