// mul_mat: node [M, N, b2, b3] = a [K, M, a2, a3] (A_TYPE: f32, f16 or a
// block type, quant.glsl) x b [K, N, b2, b3] (f32); a's matrix
// (i2 / (b2 / a2), i3 / (b3 / a3)) serves b's (i2, i3). Weights are
// dequantized to f32 and the sums are in f32 (the CPU device quantizes b to
// its weights' dot type instead).
//   VEC 1, for N == 1 (decode): one output a workgroup, its 256 invocations
//     striding along K and summing in shared memory; each weight is read once.
//   VEC 0: 16 x 16 tiles of the node, K in steps of 16 through shared memory.
#version 450
#include "common.glsl"
#include "quant.glsl"

layout(constant_id = 0) const uint A_TYPE = 0;
layout(constant_id = 1) const uint VEC = 0;
layout(local_size_x = 16, local_size_y = 16) in;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 2) readonly buffer B { float b[]; };

shared float tile_a[16][17];
shared float tile_b[16][17];
shared float partial[256];

void main() {
  const uint K = args.ne[1].x, M = args.ne[0].x, N = args.ne[0].y;
  const uint i2 = gl_WorkGroupID.z % args.ne[0].z, i3 = gl_WorkGroupID.z / args.ne[0].z;
  const uint a2 = i2 / (args.ne[2].z / args.ne[1].z), a3 = i3 / (args.ne[2].w / args.ne[1].w);
  const uint t = gl_LocalInvocationID.y * 16 + gl_LocalInvocationID.x;
  if (VEC != 0) {
    // One output (m, n) a workgroup: 256 invocations along K, then a tree sum.
    const uint m = gl_WorkGroupID.x, n = gl_WorkGroupID.y;
    float s = 0.0;
    for (uint k = t; k < K; k += 256) s += load_weight(A_TYPE, 1, k, m, a2, a3) * b[at(2, k, n, i2, i3)];
    partial[t] = s;
    barrier();
    for (uint h = 128; h > 0; h >>= 1) {
      if (t < h) partial[t] += partial[t + h];
      barrier();
    }
    if (t == 0) d[at(0, m, n, i2, i3)] = partial[0];
    return;
  }
  const uint m = gl_WorkGroupID.x * 16 + gl_LocalInvocationID.x;
  const uint n = gl_WorkGroupID.y * 16 + gl_LocalInvocationID.y;
  const uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
  float s = 0.0;
  for (uint k0 = 0; k0 < K; k0 += 16) {
    // tile_a[row m][k], tile_b[col n][k]: invocation (lx, ly) loads k = k0 + lx.
    const uint am = gl_WorkGroupID.x * 16 + ly, bn = gl_WorkGroupID.y * 16 + ly;
    tile_a[ly][lx] = (am < M && k0 + lx < K) ? load_weight(A_TYPE, 1, k0 + lx, am, a2, a3) : 0.0;
    tile_b[ly][lx] = (bn < N && k0 + lx < K) ? b[at(2, k0 + lx, bn, i2, i3)] : 0.0;
    barrier();
    for (uint k = 0; k < 16; ++k) s += tile_a[lx][k] * tile_b[ly][k];
    barrier();
  }
  if (m < M && n < N) d[at(0, m, n, i2, i3)] = s;
}
