// mul_mat: node [M, N, b2, b3] = a [K, M, a2, a3] (A_TYPE: f32, f16 or a
// block type, quant.glsl) x b [K, N, b2, b3] (f32); a's matrix
// (i2 / (b2 / a2), i3 / (b3 / a3)) serves b's (i2, i3). Weights are
// dequantized to f32 and the sums are in f32 (the CPU device quantizes b to
// its weights' dot type instead).
//   VEC 1, for N == 1 (decode): one output a workgroup, its 256 invocations
//     striding along K and summing in shared memory; each weight is read once.
//   VEC 0 (prefill): a TILE_M x TILE_N tile of the node a workgroup. K goes
//     TILE_K at a time: the workgroup dequantizes a's TILE_M x TILE_K slice
//     into shared memory once and loads b's TILE_N x TILE_K, then each
//     invocation (tm, tn) of the 16 x 16 adds to the TILE_M / 16 x TILE_N / 16
//     outputs (tm + 16 i, tn + 16 j) it owns, from registers.
#version 450
#include "common.glsl"
#include "quant.glsl"

layout(constant_id = 0) const uint A_TYPE = 0;
layout(constant_id = 1) const uint VEC = 0;
// Multiples of 16 (vk_ops.cpp chooses them).
layout(constant_id = 2) const uint TILE_M = 64;
layout(constant_id = 3) const uint TILE_N = 64;
layout(constant_id = 4) const uint TILE_K = 16;
layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 2) readonly buffer B { float b[]; };

// [k][m] and [k][n], a row padded by one so that the loads, k fastest, spread
// over the banks.
const uint A_ROW = TILE_M + 1, B_ROW = TILE_N + 1;
shared float tile_a[TILE_K * A_ROW];
shared float tile_b[TILE_K * B_ROW];
shared float partial[256];

const uint WM = TILE_M / 16, WN = TILE_N / 16;

void main() {
  const uint K = args.ne[1].x, M = args.ne[0].x, N = args.ne[0].y;
  const uint i2 = gl_WorkGroupID.z % args.ne[0].z, i3 = gl_WorkGroupID.z / args.ne[0].z;
  const uint a2 = i2 / (args.ne[2].z / args.ne[1].z), a3 = i3 / (args.ne[2].w / args.ne[1].w);
  const uint t = gl_LocalInvocationID.x;
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
  const uint m0 = gl_WorkGroupID.x * TILE_M, n0 = gl_WorkGroupID.y * TILE_N;
  const uint tm = t % 16, tn = t / 16;
  float acc[WM * WN];
  for (uint i = 0; i < WM * WN; ++i) acc[i] = 0.0;
  for (uint k0 = 0; k0 < K; k0 += TILE_K) {
    for (uint e = t; e < TILE_M * TILE_K; e += 256) {
      const uint k = k0 + e % TILE_K, m = m0 + e / TILE_K;
      tile_a[(e % TILE_K) * A_ROW + e / TILE_K] = (m < M && k < K) ? load_weight(A_TYPE, 1, k, m, a2, a3) : 0.0;
    }
    for (uint e = t; e < TILE_N * TILE_K; e += 256) {
      const uint k = k0 + e % TILE_K, n = n0 + e / TILE_K;
      tile_b[(e % TILE_K) * B_ROW + e / TILE_K] = (n < N && k < K) ? b[at(2, k, n, i2, i3)] : 0.0;
    }
    barrier();
    for (uint k = 0; k < TILE_K; ++k) {
      float av[WM];
      for (uint i = 0; i < WM; ++i) av[i] = tile_a[k * A_ROW + tm + 16 * i];
      for (uint j = 0; j < WN; ++j) {
        const float bv = tile_b[k * B_ROW + tn + 16 * j];
        for (uint i = 0; i < WM; ++i) acc[j * WM + i] += av[i] * bv;
      }
    }
    barrier();
  }
  for (uint j = 0; j < WN; ++j) {
    for (uint i = 0; i < WM; ++i) {
      const uint m = m0 + tm + 16 * i, n = n0 + tn + 16 * j;
      if (m < M && n < N) d[at(0, m, n, i2, i3)] = acc[j * WM + i];
    }
  }
}
