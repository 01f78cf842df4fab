// Row normalisation, one workgroup a row: rms_norm (CENTER 0) divides by
// sqrt(mean(x^2) + eps), norm (CENTER 1) subtracts the mean first. f32.
// params: p.x eps (f32 bits).
#version 450
#include "common.glsl"

layout(constant_id = 0) const uint CENTER = 0;
layout(local_size_x = 128) in;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 1) readonly buffer A { float a[]; };

shared float partial[128];

// The sum of v over the workgroup, in every invocation.
float workgroup_sum(float v) {
  const uint t = gl_LocalInvocationID.x;
  partial[t] = v;
  barrier();
  for (uint s = 64; s > 0; s >>= 1) {
    if (t < s) partial[t] += partial[t + s];
    barrier();
  }
  const float sum = partial[0];
  barrier();
  return sum;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uvec4 r = unravel(0, row * args.ne[0].x);
  if (r.w >= args.ne[0].w) return;
  const uint n = args.ne[0].x, t = gl_LocalInvocationID.x;
  float mean = 0.0;
  if (CENTER != 0) {
    float s = 0.0;
    for (uint i = t; i < n; i += 128) s += a[at(1, i, r.y, r.z, r.w)];
    mean = workgroup_sum(s) / float(n);
  }
  float s = 0.0;
  for (uint i = t; i < n; i += 128) {
    const float v = a[at(1, i, r.y, r.z, r.w)] - mean;
    s += v * v;
  }
  const float inv = inversesqrt(workgroup_sum(s) / float(n) + uintBitsToFloat(args.p.x));
  for (uint i = t; i < n; i += 128) d[at(0, i, r.y, r.z, r.w)] = (a[at(1, i, r.y, r.z, r.w)] - mean) * inv;
}
