// The ceiling a GPU's matrix figures are read against (`tensorpc bench`,
// docs/performance.md): its rate of fused multiply-adds, timed on a shader
// that does nothing else (shaders/fma_peak.comp).
#pragma once

#include <cstdint>

#include "tensorpc/device.h"
#include "tensorpc/status.h"

namespace tensorpc::vulkan {

// One dispatch of the FMA shader on `device` (a Vulkan device, else
// invalid_argument), each invocation `rounds` rounds long. Returns the
// seconds from its submission to its end (waited for); `fmas` is set to
// the fused multiply-adds it did. Each call records it anew: the first one
// also builds the pipeline, so a caller warms up before it times.
StatusOr<double> time_fma_dispatch(Device& device, uint32_t rounds, uint64_t& fmas);

}  // namespace tensorpc::vulkan
