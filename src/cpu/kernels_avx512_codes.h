// The VNNI driver shared by the "avx512" table's block formats beyond q8_0/q4_0
// (kernels_avx512_q32.cpp, kernels_avx512_qk.cpp). Include only from files compiled with the
// avx512 flags; everything has internal linkage, as in aligned.h.
//
// A format hands the driver 256 weights at a time (one K super-block, or eight 32-value blocks)
// as WeightCodes, the "unpack" view of kernels_portable_quant.cpp in four zmm:
//   weight = scale_s * (u - offset) + min_s,   u an unsigned byte, s its sub-block of 16.
// The format's loader leaves each 16-byte chunk of each register holding the 16 codes of one
// sub-block in value order, as cheaply as its bit planes allow (which sub-block is recorded in
// the format's ChunkMap). The driver then shuffles dwords across the four registers (Arrange)
// so that each 32-bit lane L holds, in all four registers, codes that share one scale. The
// activations are laid out once per call in exactly the same order (PreparedGroup), so one
// dot product is, per lane,
//   acc_int = bias + dpbusd(u0, x0) + ... + dpbusd(u3, x3)     (bias = -offset * sum of x quants)
//   acc    += float(acc_int) * scale * x_scale  [+ min * x_scale * sum of x quants]
// four VNNI instructions and three float ops per 256 values and activation row, with no
// horizontal work until the end of the row. That is decode (N = 1): it reads one weight row at a
// time, in address order, prefetching a row about 2 KiB ahead alongside (docs/performance.md,
// "Decode reads one weight row at a time").
//
// N > 1 turns the same loaded registers into panels of 16 weight rows, once per call, in which
// lane r of every register belongs to row r, and multiplies them by broadcast activation quants
// (gemm_panels, below): eight VNNI instructions and three float ops per 32 values, 16 rows and
// activation row. Against the 3 x 6 tiles of row-lane dot products before it (their 18
// accumulators spilled, and each tile ended in 18 horizontal sums), 1.4-1.7x in kernels_bench.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <new>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels_avx512_float_tiles.h"
#include "cpu/kernels_tile_loops.h"

namespace tensorpc::cpu {
namespace {

// map[4 r + c]: the sub-block of 16 values (0..15) in chunk c of register r, before arranging.
using ChunkMap = std::array<uint8_t, 16>;

// Nibble formats with 16 bytes per 32 values (iq4_xs, and each block of q4_1/q5_0/q5_1/iq4_nl):
// the low nibbles of 64 bytes in register 0, their high nibbles in 1, the next 64 bytes in 2, 3.
constexpr ChunkMap kHalfChunks = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};

// The sub-block lane L holds after Arrange::kTranspose.
constexpr int lane_sub_block(const ChunkMap& map, int L) { return map[4 * (L % 4) + L / 4]; }

// Lane L -> lane_sub_block(L) / per + add, for permutexvar over per-sub-block (per = 1) or
// per-32-value (per = 2) tables.
struct alignas(64) LaneIndex {
  int32_t v[16];
};
constexpr LaneIndex lane_index(const ChunkMap& map, int per, int add) {
  LaneIndex idx{};
  for (int L = 0; L < 16; ++L) idx.v[L] = lane_sub_block(map, L) / per + add;
  return idx;
}
inline __m512i load_index(const LaneIndex& idx) { return _mm512_load_si512(idx.v); }

// 16 signed levels + 128 as unsigned bytes, the codes of a format that looks its nibbles up in
// them (offset 128), in every 128-bit lane for vpshufb.
template <const int8_t (&kValues)[16]>
inline __m512i levels_plus_128() {
  static constexpr std::array<uint8_t, 16> kLevels = [] {
    std::array<uint8_t, 16> v{};
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(kValues[i] + 128);
    return v;
  }();
  return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kLevels.data())));
}
// The codes of iq4_nl/iq4_xs.
inline __m512i iq4_levels() { return levels_plus_128<kIQ4NLValues>(); }

struct WeightCodes {
  __m512i u[4];  // unsigned codes, in the ChunkMap layout until arranged
  __m512 scale;  // per lane: what multiplies sum (u - offset) * x over the lane's codes
  __m512 min;    // per lane: what multiplies the sum of those x (formats with kHasMin)
};

// How the driver turns the ChunkMap layout into lanes of one scale each.
enum class Arrange {
  // The 4 x 4 dwords of every 128-bit lane transposed across the registers: register j, dword
  // t of lane c <- register t, dword j of lane c. Lane L then holds sub-block lane_sub_block(L).
  kTranspose,
  // For formats whose registers 0 and 1 (and 2 and 3) hold the same 32-value blocks chunk by
  // chunk: dwords of registers 0 and 2 interleaved, and of 1 and 3, so lane 4c + t holds codes
  // of the block in chunk c of register 0 (t even) or 2 (t odd). Half the shuffles.
  kPairs,
  // Codes stored in lanes of one scale already: nothing to do (kernels_bench's ceiling of the
  // driver, a format that costs no unpacking).
  kNone,
};

template <typename Format>
inline void arrange(__m512i r[4]) {
  if constexpr (Format::kArrange == Arrange::kTranspose) {
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]);
    const __m512i t1 = _mm512_unpackhi_epi32(r[0], r[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]);
    const __m512i t3 = _mm512_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm512_unpacklo_epi64(t0, t2);
    r[1] = _mm512_unpackhi_epi64(t0, t2);
    r[2] = _mm512_unpacklo_epi64(t1, t3);
    r[3] = _mm512_unpackhi_epi64(t1, t3);
  } else if constexpr (Format::kArrange == Arrange::kPairs) {
    const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[2]);
    const __m512i t1 = _mm512_unpackhi_epi32(r[0], r[2]);
    const __m512i t2 = _mm512_unpacklo_epi32(r[1], r[3]);
    const __m512i t3 = _mm512_unpackhi_epi32(r[1], r[3]);
    r[0] = t0;
    r[1] = t1;
    r[2] = t2;
    r[3] = t3;
  }
}

// The 32-value block (0..7) of lane L after arranging a ChunkMap layout.
constexpr int lane_block32(const ChunkMap& map, Arrange arrangement, int L) {
  if (arrangement == Arrange::kPairs) return map[(L % 2 ? 8 : 0) + L / 4] / 2;
  return lane_sub_block(map, L) / 2;
}
constexpr LaneIndex lane_block32_index(const ChunkMap& map, Arrange arrangement, int add) {
  LaneIndex idx{};
  for (int L = 0; L < 16; ++L) idx.v[L] = lane_block32(map, arrangement, L) + add;
  return idx;
}

// 256 activation quants and what the dot product needs of them, in a format's lane order.
struct alignas(64) PreparedGroup {
  int8_t q[256];
  int32_t bias[16];  // -offset * (sum of the 16 quants in the lane)
  float d[16];       // activation scale of the lane's quants
  float dsum[16];    // d * (sum of the 16 quants in the lane)
};

// qs: 256 activation quants in value order; d[b]: the scale of values [32 b, 32 b + 32) when
// per_block32, else d[0] scales all of them.
template <typename Format>
void prepare_group(const int8_t* qs, const float* d, bool per_block32, PreparedGroup& out) {
  constexpr ChunkMap map = Format::kChunks;
  __m512i r[4];
  for (int i = 0; i < 4; ++i) {
    auto chunk = [&](int c) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * map[4 * i + c])); };
    __m512i v = _mm512_castsi128_si512(chunk(0));
    v = _mm512_inserti32x4(v, chunk(1), 1);
    v = _mm512_inserti32x4(v, chunk(2), 2);
    r[i] = _mm512_inserti32x4(v, chunk(3), 3);
  }
  arrange<Format>(r);
  __m512i sum = _mm512_setzero_si512();
  const __m512i ones = _mm512_set1_epi8(1);
  for (int i = 0; i < 4; ++i) {
    _mm512_store_si512(out.q + 64 * i, r[i]);
    sum = _mm512_dpbusd_epi32(sum, ones, r[i]);
  }
  alignas(64) float dl[16];
  for (int L = 0; L < 16; ++L) dl[L] = per_block32 ? d[lane_block32(map, Format::kArrange, L)] : d[0];
  const __m512 dv = _mm512_load_ps(dl);
  _mm512_store_ps(out.d, dv);
  _mm512_store_ps(out.dsum, _mm512_mul_ps(dv, _mm512_cvtepi32_ps(sum)));
  _mm512_store_si512(out.bias, _mm512_mullo_epi32(sum, _mm512_set1_epi32(-Format::kOffset)));
}

// Weight blocks per group of 256 values, and the group's bytes.
template <typename Format>
constexpr int64_t kBlocksPerGroup = Format::kBlocks32 ? 8 : 1;
template <typename Format>
constexpr int64_t kGroupBytes = static_cast<int64_t>(Format::kBlockBytes) * kBlocksPerGroup<Format>;

// One activation row of nb blocks (BlockQ8_0 for the 32-value formats, else BlockQ8_K) as
// ceil(nb / blocks per group) groups; a last partial group is padded with zero quants and scales.
template <typename Format>
void prepare_row(const void* row, int64_t nb, PreparedGroup* out) {
  if constexpr (Format::kBlocks32) {
    const BlockQ8_0* x = static_cast<const BlockQ8_0*>(row);
    alignas(64) int8_t qs[256];
    float d[8];
    for (int64_t g = 0; g * 8 < nb; ++g) {
      for (int b = 0; b < 8; ++b) {
        const int64_t i = 8 * g + b;
        if (i < nb) {
          std::memcpy(qs + 32 * b, x[i].qs, 32);
          d[b] = fp16_to_fp32(x[i].d);
        } else {
          std::memset(qs + 32 * b, 0, 32);
          d[b] = 0.0f;
        }
      }
      prepare_group<Format>(qs, d, true, out[g]);
    }
  } else {
    const BlockQ8_K* x = static_cast<const BlockQ8_K*>(row);
    for (int64_t g = 0; g < nb; ++g) {
      float d;
      std::memcpy(&d, &x[g].d, sizeof d);  // q8_K rows may be only 2-byte aligned
      prepare_group<Format>(x[g].qs, &d, false, out[g]);
    }
  }
}

// acc += dot(w, x) per lane (see the file comment). w.u must be arranged already.
template <typename Format>
inline __m512 dot_group(const WeightCodes& w, const PreparedGroup& x, __m512 acc) {
  __m512i s = Format::kOffset != 0 ? _mm512_load_si512(x.bias) : _mm512_setzero_si512();
  s = _mm512_dpbusd_epi32(s, w.u[0], _mm512_load_si512(x.q));
  s = _mm512_dpbusd_epi32(s, w.u[1], _mm512_load_si512(x.q + 64));
  s = _mm512_dpbusd_epi32(s, w.u[2], _mm512_load_si512(x.q + 128));
  s = _mm512_dpbusd_epi32(s, w.u[3], _mm512_load_si512(x.q + 192));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(w.scale, _mm512_load_ps(x.d)), acc);
  if constexpr (Format::kHasMin) acc = _mm512_fmadd_ps(w.min, _mm512_load_ps(x.dsum), acc);
  return acc;
}

template <typename Format>
inline WeightCodes load_codes(const uint8_t* group) {
  WeightCodes w = Format::load(group);
  arrange<Format>(w.u);
  return w;
}

// Group g of a weight row of nb blocks; the last, partial group of a 32-value format is copied
// into `tail` (zeroed past the row's blocks) so loads stay in bounds: the zero blocks have zero
// scales and meet zero activations.
template <typename Format>
const uint8_t* group_at(const uint8_t* row, int64_t nb, int64_t g, uint8_t* tail) {
  constexpr int64_t kBytes = kGroupBytes<Format>;
  const int64_t blocks = std::min<int64_t>(kBlocksPerGroup<Format>, nb - g * kBlocksPerGroup<Format>);
  if (blocks == kBlocksPerGroup<Format>) return row + g * kBytes;
  std::memset(tail, 0, kBytes);
  std::memcpy(tail, row + g * kBytes, blocks * Format::kBlockBytes);
  return tail;
}

// dot(weight row a, the prepared activation row b) over nb weight blocks, unpacking each group as
// it goes (decode). pf is the row about 2 KiB on (prefetch_row), prefetched alongside: weight rows
// are short (a few KiB) and the hardware prefetcher alone does not run far enough ahead of one
// such stream. Not inlined: inlined into its loop, iq4_nl's decode ran 5-10 % slower in
// kernels_bench.
template <typename Format>
__attribute__((noinline)) float codes_dot(int64_t nb, const uint8_t* a, const uint8_t* pf, const PreparedGroup* b) {
  constexpr int64_t kBytes = kGroupBytes<Format>;
  const int64_t full = nb / kBlocksPerGroup<Format>;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < full; ++g) {
    for (int64_t off = 0; off < kBytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + g * kBytes + off), _MM_HINT_T0);
    acc = dot_group<Format>(load_codes<Format>(a + g * kBytes), b[g], acc);
  }
  if (full * kBlocksPerGroup<Format> < nb) {
    alignas(64) uint8_t tail[kBytes];
    acc = dot_group<Format>(load_codes<Format>(group_at<Format>(a, nb, full, tail)), b[full], acc);
  }
  return hsum_ps(acc);
}

// ---------------------------------------------------------------------------------------------
// Prefill: weight panels. With more than one activation row, the weights are unpacked once per
// gemm call into panels of 16 rows in which lane r of every register belongs to row r: a unit
// (the codes that share one scale: 32 values, or 16 in q2_K/q3_K/q6_K) is 8 or 4 registers, dword
// d of lane r holding row r's codes 4d..4d+3 of the unit. The activation row's quants 4d..4d+3,
// broadcast, then multiply 16 rows at once:
//   s[lane r]   = bias + sum over d of dpbusd(codes[d], broadcast x[d])
//   acc[lane r] += float(s) * scale[r] * x_scale  [+ min[r] * x_scale * sum of x]
// so a 32-value unit costs eight VNNI instructions and three float ops per 16 rows and activation
// row, the sums stay in the lanes of their rows (no horizontal sums at the end), and a tile's
// results are stored as they are, 16 consecutive outputs a register. Units keep the values'
// order, so the activations need no re-laying: their quants are copied as they are.

template <typename Format>
struct Panels {
  static constexpr int kUnitValues = Format::kScale32 ? 32 : 16;
  static constexpr int kUnits = 256 / kUnitValues;  // units per group of 256 values
  static constexpr int kDwords = kUnitValues / 4;   // registers per unit, dwords per unit and row
  // kSource[t][d]: where dword d of unit t lies among a group's loaded registers, transposed
  // (pack_panel): register R = Format::load's u[R] before arranging, and index 4 c + e = its chunk
  // c (the sub-block Format::kChunks names), dword e.
  static constexpr std::array<std::array<std::array<uint8_t, 2>, 8>, 16> kSource = [] {
    std::array<std::array<std::array<uint8_t, 2>, 8>, 16> source{};
    for (int t = 0; t < kUnits; ++t)
      for (int d = 0; d < kDwords; ++d) {
        const int v = t * kUnitValues + 4 * d;  // the dword's first value in the group
        for (int k = 0; k < 16; ++k)
          if (Format::kChunks[k] == v / 16)
            source[t][d] = {static_cast<uint8_t>(k / 4), static_cast<uint8_t>(4 * (k % 4) + v % 16 / 4)};
      }
    return source;
  }();
  // kScaleLane[t]: a lane of Format::load's scale (and min) that holds unit t's.
  static constexpr std::array<uint8_t, 16> kScaleLane = [] {
    std::array<uint8_t, 16> lane{};
    for (int L = 15; L >= 0; --L) {
      const int sub_block = Format::kArrange == Arrange::kPairs ? 2 * lane_block32(Format::kChunks, Format::kArrange, L)
                                                                : lane_sub_block(Format::kChunks, L);
      lane[sub_block * 16 / kUnitValues] = static_cast<uint8_t>(L);
    }
    return lane;
  }();
};

// One register's worth of a panel in memory (codes, or float scales).
struct alignas(64) PanelVector {
  int32_t v[16];
};
inline void store(PanelVector& to, __m512i v) { _mm512_store_si512(to.v, v); }
inline void store(PanelVector& to, __m512 v) { _mm512_store_ps(reinterpret_cast<float*>(to.v), v); }
inline __m512i load_si(const PanelVector& v) { return _mm512_load_si512(v.v); }
inline __m512 load_ps(const PanelVector& v) { return _mm512_load_ps(reinterpret_cast<const float*>(v.v)); }

// What a unit of an activation row adds besides its quants.
struct UnitScales {
  int32_t bias;  // -offset * (sum of the unit's quants)
  float d;       // the quants' scale
  float dsum;    // d * (sum of the unit's quants)
};

inline int32_t sum_quants32(const int8_t* q) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}

// One activation row of nb blocks (BlockQ8_0 for the 32-value formats, else BlockQ8_K), `groups`
// groups of 256 values, as the panels read it: its quants in order (a last partial group padded
// with zeros) and each unit's UnitScales.
template <typename Format>
void units_of_row(const void* row, int64_t nb, int64_t groups, int8_t* q, UnitScales* s) {
  using P = Panels<Format>;
  if constexpr (Format::kBlocks32) {
    static_assert(P::kUnitValues == 32);
    const BlockQ8_0* x = static_cast<const BlockQ8_0*>(row);
    for (int64_t b = 0; b < groups * 8; ++b, q += 32) {
      if (b >= nb) {
        std::memset(q, 0, 32);
        s[b] = {0, 0.0f, 0.0f};
        continue;
      }
      std::memcpy(q, x[b].qs, 32);
      const int32_t sum = sum_quants32(x[b].qs);
      const float d = fp16_to_fp32(x[b].d);
      s[b] = {-Format::kOffset * sum, d, d * static_cast<float>(sum)};
    }
  } else {
    const uint8_t* x = static_cast<const uint8_t*>(row);  // q8_K rows may be only 2-byte aligned
    for (int64_t g = 0; g < nb; ++g, x += sizeof(BlockQ8_K), q += kQK_K) {
      float d;
      int16_t bsums[16];
      std::memcpy(&d, x + offsetof(BlockQ8_K, d), sizeof d);
      std::memcpy(bsums, x + offsetof(BlockQ8_K, bsums), sizeof bsums);
      std::memcpy(q, x + offsetof(BlockQ8_K, qs), kQK_K);
      for (int u = 0; u < P::kUnits; ++u) {
        const int32_t sum = P::kUnitValues == 32 ? bsums[2 * u] + bsums[2 * u + 1] : bsums[u];
        s[g * P::kUnits + u] = {-Format::kOffset * sum, d, d * static_cast<float>(sum)};
      }
    }
  }
}

// The 16 x 16 dwords of v[0..16) transposed: lane r of v[L] <- lane L of v[r].
inline void transpose16(__m512i v[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Each 128-bit lane k of v[4m + j] now holds rows 4m..4m+3 of column 4k + j; gather the four
  // row quarters of each column.
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(v[i], v[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(v[i + 8], v[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    v[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    v[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    v[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xdd);
  }
}

// One panel of a gemm call: rows [i, i + 16) (clamped to the last row) in unit order, codes
// codes[Panels::kDwords * t + d], scale[t] and min[t] per unit t. The loaded registers are
// transposed as they come, unarranged: the transpose takes each dword to the lane of its row, and
// the units pick their dwords from wherever their sub-blocks lie (Panels::kSource).
template <typename Format>
void pack_panel(const void* A, size_t lda, int64_t i, int64_t M, int64_t nb, int64_t groups, PanelVector* codes,
                PanelVector* scale, PanelVector* min) {
  using P = Panels<Format>;
  alignas(64) uint8_t tail[kGroupBytes<Format>];
  for (int64_t g = 0; g < groups; ++g) {
    __m512i u[4][16], sc[16], mn[16];
    for (int r = 0; r < 16; ++r) {
      const uint8_t* row = row_at<uint8_t>(A, std::min(i + r, M - 1), lda);
      const WeightCodes w = Format::load(group_at<Format>(row, nb, g, tail));
      for (int k = 0; k < 4; ++k) u[k][r] = w.u[k];
      sc[r] = _mm512_castps_si512(w.scale);
      if constexpr (Format::kHasMin) mn[r] = _mm512_castps_si512(w.min);
    }
    for (int k = 0; k < 4; ++k) transpose16(u[k]);
    transpose16(sc);
    if constexpr (Format::kHasMin) transpose16(mn);
    for (int t = 0; t < P::kUnits; ++t) {
      PanelVector* out = codes + (g * P::kUnits + t) * P::kDwords;
      for (int d = 0; d < P::kDwords; ++d) store(out[d], u[P::kSource[t][d][0]][P::kSource[t][d][1]]);
      store(scale[g * P::kUnits + t], sc[P::kScaleLane[t]]);
      if constexpr (Format::kHasMin) store(min[g * P::kUnits + t], mn[P::kScaleLane[t]]);
    }
  }
}

// Cache lines to prefetch while a tile computes.
struct PrefetchSpan {
  const char* at;
  int64_t lines;
};

// acc[p][c] = the dot products of panel p's 16 rows with activation row c over `units` units,
// stored at out[c * ldc + 16 p] (rows < mr of the last panel only). Meanwhile `ahead.lines` lines
// from ahead.at are prefetched into L2, a few each unit (the next tile's weights).
template <typename Format, int PA, int CB>
__attribute__((noinline)) void panel_tile(int64_t units, const PanelVector* const* codes,
                                          const PanelVector* const* scale, const PanelVector* const* min,
                                          const int8_t* const* q, const UnitScales* const* s, int64_t mr, float* out,
                                          size_t ldc, PrefetchSpan ahead) {
  constexpr int kD = Panels<Format>::kDwords;
  const int64_t per_unit = units > 0 ? (ahead.lines + units - 1) / units : 0;
  __m512 acc[PA][CB];
  for (int p = 0; p < PA; ++p)
    for (int c = 0; c < CB; ++c) acc[p][c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < units; ++t) {
    for (int64_t k = 0; k < per_unit && ahead.lines > 0; ++k, --ahead.lines, ahead.at += 64)
      _mm_prefetch(ahead.at, _MM_HINT_T1);
    __m512i sum[PA][CB];
    for (int c = 0; c < CB; ++c) {
      const __m512i bias = Format::kOffset != 0 ? _mm512_set1_epi32(s[c][t].bias) : _mm512_setzero_si512();
      for (int p = 0; p < PA; ++p) sum[p][c] = bias;
    }
    for (int d = 0; d < kD; ++d) {
      __m512i w[PA];
      for (int p = 0; p < PA; ++p) w[p] = load_si(codes[p][t * kD + d]);
      for (int c = 0; c < CB; ++c) {
        int32_t four;  // quants 4d..4d+3 of the unit
        std::memcpy(&four, q[c] + 4 * (t * kD + d), 4);
        const __m512i x = _mm512_set1_epi32(four);
        for (int p = 0; p < PA; ++p) sum[p][c] = _mm512_dpbusd_epi32(sum[p][c], w[p], x);
      }
    }
    for (int p = 0; p < PA; ++p) {
      const __m512 sc = load_ps(scale[p][t]);
      for (int c = 0; c < CB; ++c)
        acc[p][c] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[p][c]), _mm512_mul_ps(sc, _mm512_set1_ps(s[c][t].d)), acc[p][c]);
      if constexpr (Format::kHasMin) {
        const __m512 mn = load_ps(min[p][t]);
        for (int c = 0; c < CB; ++c) acc[p][c] = _mm512_fmadd_ps(mn, _mm512_set1_ps(s[c][t].dsum), acc[p][c]);
      }
    }
  }
  for (int c = 0; c < CB; ++c)
    for (int p = 0; p < PA; ++p) {
      const int64_t rows = std::clamp<int64_t>(mr - 16 * p, 0, 16);
      _mm512_mask_storeu_ps(out + c * ldc + 16 * p, static_cast<__mmask16>((1u << rows) - 1), acc[p][c]);
    }
}

// Prefill tiles: two panels (32 weight rows) x six activation rows, 12 accumulators and 12 sums.
// 2 x 7, 3 x 4 and 4 x 3 were measured too (kernels_bench at the 250M model's shapes, q8_0, q4_K
// and q6_K): none was faster beyond this guest's noise.
constexpr int kPanelTile = 2, kPanelCols = 6;

struct PreparedRowTag {};
struct UnitScalesTag {};
struct PanelCodesTag {};
struct PanelScalesTag {};
struct UnitQuantsTag {};

// Weight rows [0, M) against N > 1 activation rows (BlockQ8_0 or BlockQ8_K rows of nb blocks).
template <typename Format>
void gemm_panels(int64_t nb, int64_t groups, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb,
                 float* C, size_t ldc) {
  using P = Panels<Format>;
  const int64_t units = groups * P::kUnits;
  AlignedArray<int8_t> owned_q;
  AlignedArray<UnitScales> owned_s;
  AlignedArray<PanelVector> owned_codes, owned_scales;
  int8_t* q = call_scratch<int8_t, UnitQuantsTag>(static_cast<size_t>(N * groups * 256), owned_q);
  UnitScales* s = call_scratch<UnitScales, UnitScalesTag>(static_cast<size_t>(N * units), owned_s);
  PanelVector* codes =
      call_scratch<PanelVector, PanelCodesTag>(static_cast<size_t>(kPanelTile * units * P::kDwords), owned_codes);
  PanelVector* scales =
      call_scratch<PanelVector, PanelScalesTag>(static_cast<size_t>(2 * kPanelTile * units), owned_scales);
  if (q == nullptr || s == nullptr || codes == nullptr || scales == nullptr) throw std::bad_alloc();
  // The first tile's weight rows are fetched into L2 while the activations are copied (and each
  // later tile's while the one before it computes, below).
  const int64_t first_lines = std::min<int64_t>(M, 16 * kPanelTile) * static_cast<int64_t>(lda) / 64;
  for (int64_t j = 0, line = 0; j < N; ++j) {
    for (const int64_t end = std::min(first_lines, line + (first_lines + N - 1) / N); line < end; ++line)
      _mm_prefetch(static_cast<const char*>(A) + 64 * line, _MM_HINT_T1);
    units_of_row<Format>(row_at<uint8_t>(B, j, ldb), nb, groups, q + j * groups * 256, s + j * units);
  }
  for (int64_t i = 0; i < M; i += 16 * kPanelTile) {
    const PanelVector* pc[kPanelTile];
    const PanelVector* ps[kPanelTile];
    const PanelVector* pm[kPanelTile];
    for (int p = 0; p < kPanelTile; ++p) {
      PanelVector* c = codes + p * units * P::kDwords;
      PanelVector* sc = scales + 2 * p * units;
      pack_panel<Format>(A, lda, i + 16 * p, M, nb, groups, c, sc, sc + units);
      pc[p] = c;
      ps[p] = sc;
      pm[p] = sc + units;
    }
    // The next tile's weight rows are fetched into L2 behind the arithmetic, a slice per column
    // tile and a few lines per unit: read only when packed, 16 rows at a time, they stalled the
    // packing on DRAM (pack_panel was 13-18 % of a q8_0 prefill's samples, most on its loads), and
    // a column tile's whole slice at once stalled on the prefetches themselves.
    const int64_t next = std::min(M, i + 16 * kPanelTile), next_end = std::min(M, next + 16 * kPanelTile);
    const int64_t tiles = (N + kPanelCols - 1) / kPanelCols;
    const int64_t lines = (next_end - next) * static_cast<int64_t>(lda) / 64, per_tile = (lines + tiles - 1) / tiles;
    PrefetchSpan ahead{static_cast<const char*>(A) + next * static_cast<int64_t>(lda), 0};
    for (int64_t j = 0, line = 0; j < N; j += kPanelCols, line += per_tile) {
      ahead.at += 64 * ahead.lines;
      ahead.lines = std::clamp<int64_t>(lines - line, 0, per_tile);
      const int64_t nr = std::min<int64_t>(kPanelCols, N - j);
      const int8_t* bq[kPanelCols];
      const UnitScales* bs[kPanelCols];
      for (int c = 0; c < kPanelCols; ++c) {
        const int64_t col = std::min(j + c, N - 1);
        bq[c] = q + col * groups * 256;
        bs[c] = s + col * units;
      }
      with_count<kPanelCols>(nr, [&](auto n) {
        panel_tile<Format, kPanelTile, n>(units, pc, ps, pm, bq, bs, M - i, C + j * ldc + i, ldc, ahead);
      });
    }
  }
}

// The GemmFn of Format (kernels.h contract). Decode: one weight row at a time, a single read
// stream in address order. Otherwise weight panels.
template <typename Format>
void gemm_codes(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  const int64_t nb = K / (Format::kBlocks32 ? kQK : kQK_K);
  const int64_t groups = (nb + kBlocksPerGroup<Format> - 1) / kBlocksPerGroup<Format>;
  if (N > 1) return gemm_panels<Format>(nb, groups, M, N, A, lda, B, ldb, C, ldc);
  AlignedArray<PreparedGroup> owned;
  PreparedGroup* prepared = call_scratch<PreparedGroup, PreparedRowTag>(static_cast<size_t>(groups), owned);
  if (prepared == nullptr) throw std::bad_alloc();  // the device fails the compute with a Status
  prepare_row<Format>(B, nb, prepared);
  for (int64_t i = 0; i < M; ++i)
    C[i] = codes_dot<Format>(nb, row_at<uint8_t>(A, i, lda), row_at<uint8_t>(A, prefetch_row(i, 1, M, lda), lda),
                             prepared);
}

}  // namespace
}  // namespace tensorpc::cpu
