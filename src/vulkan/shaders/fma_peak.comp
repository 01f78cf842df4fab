// The device's peak rate of fused multiply-adds, for `tensorpc bench`
// (vk_peak.cpp): each invocation runs p.x rounds of CHAINS independent
// fma() chains on registers, reading no memory; one store at the end keeps
// the chains from being optimized away. The multiplier and addend come from
// the push constants (p.y, p.z as float bits), so nothing folds at compile
// time. FMAs done: groups × 256 × p.x × CHAINS.
#version 450
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer Out { float result[]; };

const uint CHAINS = 16;

void main() {
  const float m = uintBitsToFloat(args.p.y), a = uintBitsToFloat(args.p.z);
  float acc[CHAINS];
  for (uint c = 0; c < CHAINS; ++c) acc[c] = float(gl_LocalInvocationID.x + c) * 1e-3;
  for (uint r = 0; r < args.p.x; ++r) {
    for (uint c = 0; c < CHAINS; ++c) acc[c] = fma(acc[c], m, a);
  }
  float sum = 0;
  for (uint c = 0; c < CHAINS; ++c) sum += acc[c];
  result[gl_GlobalInvocationID.x] = sum;
}
