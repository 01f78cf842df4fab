// softmax(x * scale + mask) per row, one workgroup a row. The mask (p.y = 1)
// is f32 [ne0, >= ne1], row i1 used for every i2, i3. The sinks (p.z = 1,
// binding 3 from off.w, f32 [ne2] contiguous) give each row of head i2 one
// more logit that joins its maximum and its sum but has no column, as on
// the CPU device (src/cpu/ops_softmax.cpp). A row whose maximum is -inf
// (fully masked, no finite sink) becomes zeros. params: p.x scale (f32
// bits), p.y mask, p.z sinks.
#version 450
#include "common.glsl"

layout(local_size_x = 128) in;

layout(binding = 0) buffer D { float d[]; };
layout(binding = 1) readonly buffer A { float a[]; };
layout(binding = 2) readonly buffer M { float mask[]; };
layout(binding = 3) readonly buffer S { float sinks[]; };

shared float partial[128];

float workgroup_reduce(float v, bool take_max) {
  const uint t = gl_LocalInvocationID.x;
  partial[t] = v;
  barrier();
  for (uint s = 64; s > 0; s >>= 1) {
    if (t < s) partial[t] = take_max ? max(partial[t], partial[t + s]) : partial[t] + partial[t + s];
    barrier();
  }
  const float r = partial[0];
  barrier();
  return r;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  const uvec4 r = unravel(0, row * args.ne[0].x);
  if (r.w >= args.ne[0].w) return;
  const uint n = args.ne[0].x, t = gl_LocalInvocationID.x;
  const float scale = uintBitsToFloat(args.p.x);
  const uint mrow = r.y % args.ne[2].y;
  const float neg_inf = uintBitsToFloat(0xff800000u);

  float m = neg_inf;
  for (uint i = t; i < n; i += 128) {
    float v = a[at(1, i, r.y, r.z, r.w)] * scale;
    if (args.p.y != 0) v += mask[at(2, i, mrow, 0, 0)];
    d[at(0, i, r.y, r.z, r.w)] = v;
    m = max(m, v);
  }
  m = workgroup_reduce(m, true);
  // A NaN sink leaves the maximum alone and makes the row NaN through the sum.
  const float sink = args.p.z != 0 ? sinks[args.off.w + r.z] : neg_inf;
  if (sink > m) m = sink;
  float s = 0.0;
  for (uint i = t; i < n; i += 128) {
    const uint j = at(0, i, r.y, r.z, r.w);
    const float e = m == neg_inf ? 0.0 : exp(d[j] - m);
    d[j] = e;
    s += e;
  }
  s = workgroup_reduce(s, false);
  if (m != neg_inf) s += exp(sink - m);
  const float inv = m == neg_inf ? 0.0 : 1.0 / s;
  for (uint i = t; i < n; i += 128) d[at(0, i, r.y, r.z, r.w)] *= inv;
}
