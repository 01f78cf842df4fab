// argmax: the index of the largest value of each row of f32 a, one workgroup
// a row, into i32 [ne1, ne2, ne3]. As the CPU device counts it: the first of
// equal maxima wins, NaN never does, and a row of -inf and NaN gives 0.
#version 450
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) writeonly buffer D { int d[]; };
layout(binding = 1) readonly buffer A { float a[]; };

const uint kNone = 0xffffffffu;
shared float best_value[128];
shared uint best_index[128];

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uvec4 r = unravel(1, row * args.ne[1].x);
  if (r.w >= args.ne[1].w) return;
  const uint t = gl_LocalInvocationID.x;
  // Each invocation scans its elements in order, so its first maximum is its lowest.
  float v = uintBitsToFloat(0xff800000u);
  uint index = kNone;
  for (uint i = t; i < args.ne[1].x; i += 128) {
    const float x = a[at(1, i, r.y, r.z, r.w)];
    if (x > v) {
      v = x;
      index = i;
    }
  }
  best_value[t] = v;
  best_index[t] = index;
  barrier();
  for (uint s = 64; s > 0; s >>= 1) {
    if (t < s) {
      const float w = best_value[t + s];
      const uint j = best_index[t + s];
      if (j != kNone && (best_index[t] == kNone || w > best_value[t] || (w == best_value[t] && j < best_index[t]))) {
        best_value[t] = w;
        best_index[t] = j;
      }
    }
    barrier();
  }
  if (t == 0) d[at(0, r.y, r.z, r.w, 0)] = best_index[0] == kNone ? 0 : int(best_index[0]);
}
