// mul_mat: node [M, N, b2, b3] = a [K, M, a2, a3] (A_TYPE: f32, f16 or a
// block type, quant.glsl) x b [K, N, b2, b3] (f32); a's matrix
// (i2 / (b2 / a2), i3 / (b3 / a3)) serves b's (i2, i3). Weights are
// dequantized to f32 and the sums are in f32 (the CPU device quantizes b to
// its weights' dot type instead).
//   MODE 1, for N == 1 (decode): TILE_M outputs a workgroup, ROWS an
//     invocation; the 256 ROWS / TILE_M invocations (lanes) of a group of
//     ROWS rows take steps along K (runs of 8 values of a plain weight,
//     units of 32 of a block type, whose codes are read as u32 pairs and
//     whose scales once: quant.glsl's unit_codes), each step of b read once
//     for the ROWS rows; a row's sums meet by a tree in shared memory (or by
//     shuffles, below). Each weight is read once. The groups of rows spread
//     over x and y.
//   MODE 0 (prefill): a TILE_M x TILE_N tile of the node a workgroup. K goes
//     TILE_K at a time: the workgroup dequantizes a's TILE_M x TILE_K slice
//     into shared memory once and loads b's TILE_N x TILE_K, then each
//     invocation (tm, tn) of the 16 x 16 adds to the TILE_M / 16 x TILE_N / 16
//     outputs (tm + 16 i, tn + 16 j) it owns, from registers. The tiles keep
//     4 values of K a vec4 (a's rows and b's columns), so a's runs and b's
//     quads go in whole and the product takes dots of vec4s.
// mul_mat_id (op.h): node [M, k, T] = expert ids[s, t] of a [K, M, E] x b's
// row (n_b == 1 ? 0 : s, t), b [K, n_b, T]; ids i32 [k, T] at binding 3 from
// off.w, its element strides p.x and p.y. An id outside [0, E) makes its row
// zeros and reads no weight.
//   MODE 2 (few tokens): MODE 1's workgroups for each pair (s, t) (y and z),
//     the expert its id; only the chosen experts' rows are read.
//   MODE 3: MODE 0's tiles over the k T pairs (pair s + k t a column),
//     workgroup z an expert: a tile where no pair chose that expert returns
//     at once; the others take the columns of the pairs that did (b's rows
//     of the rest read as zeros) and write only those. Expert 0's tiles also
//     write the zeros of the pairs whose id is out of range.
//   Built twice: as `mul_mat`, and with SUBGROUP_SUM as `mul_mat_subgroup`
//   for devices with subgroup shuffles, whose MODE 1 and 2 number the
//   invocations subgroup by subgroup, so that a row's lanes are aligned
//   lanes of one subgroup or whole subgroups, and sum them by shuffles (and
//   shared memory across a row's subgroups) instead of the tree.
#version 450
#ifdef SUBGROUP_SUM
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"
#include "quant.glsl"

layout(constant_id = 0) const uint A_TYPE = 0;
layout(constant_id = 1) const uint MODE = 0;
const bool BY_ID = MODE >= 2, VEC = MODE == 1 || MODE == 2;
// Multiples of 16 (vk_ops.cpp chooses them); in MODE 1 and 2 TILE_M is the
// rows a workgroup, ROWS times a power of two dividing 256.
layout(constant_id = 2) const uint TILE_M = 64;
layout(constant_id = 3) const uint TILE_N = 64;
layout(constant_id = 4) const uint TILE_K = 16;
// Bit 0, b's runs of 8 are two aligned vec4s (dim 0 contiguous, offset and
// strides multiples of 4); bit 1, a's too (f32; f16 as u32 pairs), or a
// block type's blocks all start at even words; bit 2, a's runs or blocks
// all start at multiples of 16 bytes (f16 read as a uvec4; quant.glsl's
// ALIGN_16).
layout(constant_id = 5) const uint VEC4 = 0;
const uint A_ALIGN = (VEC4 & 4) != 0 ? ALIGN_16 : (VEC4 & 2) != 0 ? ALIGN_EVEN : ALIGN_ANY;
// MODE 1 and 2: the rows an invocation sums, each run of b read once for all.
layout(constant_id = 6) const uint ROWS = 1;
layout(local_size_x = 256) in;

layout(binding = 0) writeonly buffer D { float d[]; };
layout(binding = 2) readonly buffer B { float b[]; };
layout(binding = 2) readonly buffer B4 { vec4 b4[]; };
layout(binding = 1) readonly buffer WeightF32x4 { vec4 weight_f32x4[]; };
layout(binding = 3) readonly buffer Ids { int ids[]; };

// [m][k] and [n][k], 4 values of k a vec4, a row padded by one vec4 so
// that the rows an invocation's neighbours read spread over the banks:
// element (k, m) is tile_a[m K4 + k / 4][k % 4].
const uint K4 = TILE_K / 4 + 1;
shared vec4 tile_a[TILE_M * K4];
shared vec4 tile_b[TILE_N * K4];
shared float partial[256];

const uint WM = TILE_M / 16, WN = TILE_N / 16;

// mul_mat_id: the expert of pair n (s + k t), -1 when its id is out of range.
int expert_of(uint n) {
  const uint k = args.ne[0].y;
  const int id = ids[args.off.w + (n % k) * args.p.x + (n / k) * args.p.y];
  return id >= 0 && id < int(args.ne[1].z) ? id : -1;
}

// The index of element k of column n of b: mul_mat's (n, i2, i3),
// mul_mat_id's row of pair n (its slot's where n_b is k, else row 0).
uint b_at(uint k, uint n, uint i2, uint i3) {
  if (!BY_ID) return at(2, k, n, i2, i3);
  const uint slots = args.ne[0].y;
  return at(2, k, args.ne[2].y == 1 ? 0 : n % slots, n / slots, 0);
}

float b_value(uint k, uint n, uint i2, uint i3) { return b[b_at(k, n, i2, i3)]; }

// Elements k .. k + 7 of b's column n, and of a's row m (a plain type).
void b_run(uint k, uint n, uint i2, uint i3, out vec4 lo, out vec4 hi) {
  if ((VEC4 & 1) != 0) {
    const uint e = b_at(k, n, i2, i3) / 4;
    lo = b4[e];
    hi = b4[e + 1];
    return;
  }
  for (uint j = 0; j < 4; ++j) {
    lo[j] = b_value(k + j, n, i2, i3);
    hi[j] = b_value(k + 4 + j, n, i2, i3);
  }
}

void a_run(uint k, uint m, uint a2, uint a3, out vec4 lo, out vec4 hi) {
  if ((VEC4 & 2) != 0 && A_TYPE == TYPE_F32) {
    const uint e = at(1, k, m, a2, a3) / 4;
    lo = weight_f32x4[e];
    hi = weight_f32x4[e + 1];
    return;
  }
  if ((VEC4 & 4) != 0) {  // f16: a uvec4 of pairs
    const uvec4 q = weight_quads[at(1, k, m, a2, a3) / 8];
    lo = vec4(unpackHalf2x16(q.x), unpackHalf2x16(q.y));
    hi = vec4(unpackHalf2x16(q.z), unpackHalf2x16(q.w));
    return;
  }
  if ((VEC4 & 2) != 0) {  // f16: four pairs
    const uint e = at(1, k, m, a2, a3) / 2;
    lo = vec4(unpackHalf2x16(weight_pairs[e]), unpackHalf2x16(weight_pairs[e + 1]));
    hi = vec4(unpackHalf2x16(weight_pairs[e + 2]), unpackHalf2x16(weight_pairs[e + 3]));
    return;
  }
  for (uint j = 0; j < 4; ++j) {
    lo[j] = load_weight(A_TYPE, 1, k + j, m, a2, a3);
    hi[j] = load_weight(A_TYPE, 1, k + 4 + j, m, a2, a3);
  }
}

// Output (m, n): mul_mat's at (i2, i3), mul_mat_id's pair n's row.
void store(uint m, uint n, uint i2, uint i3, float v) {
  const uint slots = args.ne[0].y;
  if (BY_ID) d[at(0, m, n % slots, n / slots, 0)] = v;
  else d[at(0, m, n, i2, i3)] = v;
}

void main() {
  const uint K = args.ne[1].x, M = args.ne[0].x;
  // mul_mat_id's columns are its k T pairs, its dims 2 and 3 none.
  const uint N = BY_ID ? args.ne[0].y * args.ne[0].z : args.ne[0].y;
  const uint i2 = BY_ID ? 0 : gl_WorkGroupID.z % args.ne[0].z, i3 = BY_ID ? 0 : gl_WorkGroupID.z / args.ne[0].z;
  uint a2 = BY_ID ? 0 : i2 / (args.ne[2].z / args.ne[1].z), a3 = BY_ID ? 0 : i3 / (args.ne[2].w / args.ne[1].w);
  const uint t = gl_LocalInvocationID.x;
  if (VEC) {
    // TILE_M rows a workgroup, ROWS an invocation, LANES invocations
    // (lanes) a group of ROWS rows. A lane takes steps along K, LANES steps
    // apart, so that a group's lanes read consecutive bytes; their sums meet
    // at the end, row by row.
#ifdef SUBGROUP_SUM
    const uint at_row = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
    const uint at_row = t;
#endif
    const uint LANES = 256 * ROWS / TILE_M, lane = at_row % LANES;
    const uint group = BY_ID ? gl_WorkGroupID.x : gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    const uint m = group * TILE_M + at_row / LANES * ROWS;  // this invocation's first row
    const uint n = BY_ID ? gl_WorkGroupID.y + args.ne[0].y * gl_WorkGroupID.z : 0;
    if (BY_ID) {
      const int e = expert_of(n);
      if (e < 0) {  // the same for the whole workgroup
        for (uint i = 0; i < ROWS; ++i) {
          if (lane == 0 && m + i < M) store(m + i, n, 0, 0, 0.0);
        }
        return;
      }
      a2 = uint(e);
    }
    float s[ROWS];
    for (uint i = 0; i < ROWS; ++i) s[i] = 0.0;
    if (m < M) {
      // Rows past M read row M - 1 and are not stored.
      uint row[ROWS];
      for (uint i = 0; i < ROWS; ++i) row[i] = min(m + i, M - 1);
      if (A_TYPE <= TYPE_BF16) {
        for (uint k0 = 8 * lane; k0 < K; k0 += 8 * LANES) {
          if (k0 + 8 <= K) {
            vec4 b_lo, b_hi;
            b_run(k0, n, i2, i3, b_lo, b_hi);
            for (uint i = 0; i < ROWS; ++i) {
              vec4 a_lo, a_hi;
              a_run(k0, row[i], a2, a3, a_lo, a_hi);
              s[i] += dot(a_lo, b_lo) + dot(a_hi, b_hi);
            }
          } else {
            for (uint k = k0; k < K; ++k) {
              const float bv = b_value(k, n, i2, i3);
              for (uint i = 0; i < ROWS; ++i) s[i] += load_weight(A_TYPE, 1, k, row[i], a2, a3) * bv;
            }
          }
        }
      } else {
        // Units of 32 values (K is a whole number of blocks): b's read once,
        // then each row's codes and scales (quant.glsl's unit_codes).
        const uint units = block_values(A_TYPE) / 32;
        for (uint u = lane; u < K / 32; u += LANES) {
          vec4 bq[8];
          for (uint j = 0; j < 4; ++j) b_run(32 * u + 8 * j, n, i2, i3, bq[2 * j], bq[2 * j + 1]);
          const vec2 b_sum = vec2(dot(bq[0] + bq[1] + bq[2] + bq[3], vec4(1.0)), dot(bq[4] + bq[5] + bq[6] + bq[7], vec4(1.0)));
          for (uint i = 0; i < ROWS; ++i) {
            vec4 c[8];
            const vec4 a = unit_codes(A_TYPE, at(1, u / units, row[i], a2, a3), u % units, 0, 8, A_ALIGN, c);
            const float lo = dot(c[0], bq[0]) + dot(c[1], bq[1]) + dot(c[2], bq[2]) + dot(c[3], bq[3]);
            const float hi = dot(c[4], bq[4]) + dot(c[5], bq[5]) + dot(c[6], bq[6]) + dot(c[7], bq[7]);
            s[i] += a.x * lo - a.y * b_sum.x + a.z * hi - a.w * b_sum.y;
          }
        }
      }
    }
    for (uint i = 0; i < ROWS; ++i) {
#ifdef SUBGROUP_SUM
      // Subgroup sizes are powers of two.
      float r = s[i];
      for (uint h = min(gl_SubgroupSize, LANES) / 2; h > 0; h >>= 1) r += subgroupShuffleXor(r, h);
      if (gl_SubgroupSize < LANES) {  // the row's LANES / gl_SubgroupSize subgroups, from this one
        if (gl_SubgroupInvocationID == 0) partial[gl_SubgroupID] = r;
        barrier();
        if (lane == 0) {
          for (uint g = 1; g < LANES / gl_SubgroupSize; ++g) r += partial[gl_SubgroupID + g];
        }
        barrier();
      }
      if (lane == 0 && m + i < M) store(m + i, n, i2, i3, r);
#else
      partial[t] = s[i];
      barrier();
      for (uint h = LANES / 2; h > 0; h >>= 1) {
        if (lane < h) partial[t] += partial[t + h];
        barrier();
      }
      if (lane == 0 && m + i < M) store(m + i, n, i2, i3, partial[t]);
#endif
    }
    return;
  }
  const uint m0 = gl_WorkGroupID.x * TILE_M, n0 = gl_WorkGroupID.y * TILE_N;
  const uint tm = t % 16, tn = t / 16;
  // MODE 3: which of the tile's columns take b (the pairs that chose this
  // expert) and which are written (those, and for expert 0 the pairs whose id
  // is out of range, zeros), as bits. Every invocation finds the same, so a
  // tile with none returns as a whole.
  const uint WORDS = (TILE_N + 31) / 32;
  uint take[WORDS], write[WORDS];
  if (BY_ID) {
    const int expert = int(gl_WorkGroupID.z);
    a2 = gl_WorkGroupID.z;
    uint any = 0;
    for (uint w = 0; w < WORDS; ++w) {
      take[w] = write[w] = 0;
      for (uint j = 0; j < 32 && 32 * w + j < TILE_N && n0 + 32 * w + j < N; ++j) {
        const int e = expert_of(n0 + 32 * w + j);
        if (e == expert) take[w] |= 1u << j;
        if (e == expert || (e < 0 && expert == 0)) write[w] |= 1u << j;
      }
      any |= write[w];
    }
    if (any == 0) return;
  }
  float acc[WM * WN];
  for (uint i = 0; i < WM * WN; ++i) acc[i] = 0.0;
  for (uint k0 = 0; k0 < K; k0 += TILE_K) {
    // a's slice, a run of 8 values an invocation (a block's runs are aligned
    // with TILE_K's, as K is a whole number of blocks).
    for (uint e = t; e < TILE_M * TILE_K / 8; e += 256) {
      const uint h = e % (TILE_K / 8), row = e / (TILE_K / 8), k = k0 + 8 * h, m = m0 + row;
      vec4 lo = vec4(0.0), hi = vec4(0.0);
      if (A_TYPE > TYPE_BF16 && m < M && k < K) {
        const uint n = block_values(A_TYPE);
        block_run(A_TYPE, at(1, k / n, m, a2, a3), (k % n) / 8, A_ALIGN, lo, hi);
      } else if (m < M && k + 8 <= K) {
        a_run(k, m, a2, a3, lo, hi);
      } else if (m < M) {
        for (uint j = 0; k + j < K && j < 8; ++j) {
          const float v = load_weight(A_TYPE, 1, k + j, m, a2, a3);
          if (j < 4) lo[j] = v;
          else hi[j - 4] = v;
        }
      }
      tile_a[row * K4 + 2 * h] = lo;
      tile_a[row * K4 + 2 * h + 1] = hi;
    }
    // b's slice, 4 values of K an invocation (a vec4 where VEC4 says so).
    for (uint e = t; e < TILE_N * TILE_K / 4; e += 256) {
      const uint h = e % (TILE_K / 4), j = e / (TILE_K / 4), k = k0 + 4 * h, n = n0 + j;
      const bool take = n < N && k < K && (!BY_ID || ((take[j / 32] >> (j % 32)) & 1) != 0);
      vec4 v = vec4(0.0);
      if (take && (VEC4 & 1) != 0 && k + 4 <= K) {
        v = b4[b_at(k, n, i2, i3) / 4];
      } else if (take) {
        for (uint i = 0; i < 4 && k + i < K; ++i) v[i] = b_value(k + i, n, i2, i3);
      }
      tile_b[j * K4 + h] = v;
    }
    barrier();
    for (uint k4 = 0; k4 < TILE_K / 4; ++k4) {
      vec4 av[WM];
      for (uint i = 0; i < WM; ++i) av[i] = tile_a[(tm + 16 * i) * K4 + k4];
      for (uint j = 0; j < WN; ++j) {
        const vec4 bv = tile_b[(tn + 16 * j) * K4 + k4];
        for (uint i = 0; i < WM; ++i) acc[j * WM + i] += dot(av[i], bv);
      }
    }
    barrier();
  }
  for (uint j = 0; j < WN; ++j) {
    const uint c = tn + 16 * j;
    if (BY_ID && ((write[c / 32] >> (c % 32)) & 1) == 0) continue;
    for (uint i = 0; i < WM; ++i) {
      const uint m = m0 + tm + 16 * i, n = n0 + c;
      if (m < M && n < N) store(m, n, i2, i3, acc[j * WM + i]);
    }
  }
}
