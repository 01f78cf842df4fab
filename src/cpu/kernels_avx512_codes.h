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
// horizontal work until the end of the row. The unpacking and arranging are shared by every
// activation row of a tile.
//
// Decode (N = 1) reads one weight row at a time, in address order, prefetching a row about 2 KiB
// ahead alongside (docs/performance.md, "Decode reads one weight row at a time"); N > 1 runs tiles of
// three rows by six activation rows (kPrefillRows, kPrefillCols), the three rows unpacked once
// into scratch that every tile of activation rows reads (unpacked_tile), where before each tile
// unpacked them again: 1.2x the q8_0 250M model's 128-token prefill.
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

// out[c * RA + r] = dot(weight row a[r], prepared activation row b[c]) over nb weight blocks,
// unpacking each group as it goes (decode, and a single tile of activation rows). pf[r] is the
// matching row of a tile about 2 KiB on (prefetch_row), prefetched alongside: weight rows are
// short (a few KiB) and the hardware prefetcher alone does not run far enough ahead of one such
// stream. Not inlined into codes_rows: a tile's accumulators leave few registers, and inlined
// its spills fell worse (iq4_nl 5-10 % slower in kernels_bench).
template <typename Format, int RA, int CB>
__attribute__((noinline)) void codes_tile(int64_t nb, const uint8_t* const* a, const uint8_t* const* pf,
                                          const PreparedGroup* const* b, float* out) {
  constexpr int64_t kBytes = kGroupBytes<Format>;
  const int64_t groups = (nb + kBlocksPerGroup<Format> - 1) / kBlocksPerGroup<Format>;
  __m512 acc[RA][CB];
  for (int r = 0; r < RA; ++r)
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ps();
  auto step = [&](const uint8_t* const* ga, int64_t g) {
    WeightCodes w[RA];
    for (int r = 0; r < RA; ++r) w[r] = load_codes<Format>(ga[r]);
    for (int c = 0; c < CB; ++c)
      for (int r = 0; r < RA; ++r) acc[r][c] = dot_group<Format>(w[r], b[c][g], acc[r][c]);
  };
  const int64_t full = nb / kBlocksPerGroup<Format>;
  const uint8_t* ga[RA];
  for (int64_t g = 0; g < full; ++g) {
    for (int r = 0; r < RA; ++r) {
      ga[r] = a[r] + g * kBytes;
      for (int64_t off = 0; off < kBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf[r] + g * kBytes + off), _MM_HINT_T0);
    }
    step(ga, g);
  }
  if (full < groups) {
    alignas(64) uint8_t tail[RA][kBytes];
    for (int r = 0; r < RA; ++r) ga[r] = group_at<Format>(a[r], nb, full, tail[r]);
    step(ga, full);
  }
  __m512 flat[CB * RA];
  for (int c = 0; c < CB; ++c)
    for (int r = 0; r < RA; ++r) flat[c * RA + r] = acc[r][c];
  hsum_each<CB * RA>(flat, out);
}

// out[c * RA + r] = dot(weight row r, prepared activation row b[c]) from the rows' groups
// unpacked and arranged already (w[r * groups + g]), so that a group is unpacked once per gemm
// call, not once per tile of activation rows. The RA groups are loaded once per step and each
// activation group serves them all: in kernels_bench 4-16 % faster than going row by row
// (which loads the activations RA times), and 3 x 6 stayed the best tile (2 x 6 and 2 x 8
// tried).
template <typename Format, int RA, int CB>
__attribute__((noinline)) void unpacked_tile(int64_t groups, const WeightCodes* w, const PreparedGroup* const* b,
                                             float* out) {
  __m512 acc[RA][CB];
  for (int r = 0; r < RA; ++r)
    for (int c = 0; c < CB; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    WeightCodes wg[RA];
    for (int r = 0; r < RA; ++r) wg[r] = w[r * groups + g];
    for (int c = 0; c < CB; ++c)
      for (int r = 0; r < RA; ++r) acc[r][c] = dot_group<Format>(wg[r], b[c][g], acc[r][c]);
  }
  __m512 flat[CB * RA];
  for (int c = 0; c < CB; ++c)
    for (int r = 0; r < RA; ++r) flat[c * RA + r] = acc[r][c];
  hsum_each<CB * RA>(flat, out);
}

template <typename Format, int RA, int CB>
void codes_rows(int64_t nb, int64_t i, int64_t M, int64_t N, const void* A, size_t lda, const PreparedGroup* prepared,
                int64_t groups, float* C, size_t ldc) {
  const uint8_t* a[RA];
  const uint8_t* next[RA];
  tile_rows<RA>(A, i, M - 1, lda, a);
  tile_rows<RA>(A, prefetch_row(i, RA, M, lda), M - 1, lda, next);
  // With more than one tile of activation rows, the RA rows' groups are unpacked and arranged
  // once, into scratch that every tile reads.
  float out[CB * RA];
  if (CB > 1 && N > CB) {
    AlignedArray<WeightCodes> owned;
    WeightCodes* w = call_scratch<WeightCodes, Format>(static_cast<size_t>(RA * groups), owned);
    if (w == nullptr) throw std::bad_alloc();  // the device fails the compute with a Status
    alignas(64) uint8_t tail[kGroupBytes<Format>];
    for (int r = 0; r < RA; ++r)
      for (int64_t g = 0; g < groups; ++g) w[r * groups + g] = load_codes<Format>(group_at<Format>(a[r], nb, g, tail));
    for (int64_t j = 0; j < N; j += CB) {
      const int64_t nr = std::min<int64_t>(CB, N - j);
      const PreparedGroup* b[CB];
      tile_rows<CB>(prepared, j, N - 1, groups * sizeof(PreparedGroup), b);
      with_count<CB>(nr, [&](auto n) { unpacked_tile<Format, RA, n>(groups, w, b, out); });
      store_tile<RA>(out, std::min<int64_t>(RA, M - i), nr, C + j * ldc + i, ldc);
    }
    return;
  }
  for (int64_t j = 0; j < N; j += CB) {
    const int64_t nr = std::min<int64_t>(CB, N - j);
    const PreparedGroup* b[CB];
    tile_rows<CB>(prepared, j, N - 1, groups * sizeof(PreparedGroup), b);
    with_count<CB>(nr, [&](auto n) { codes_tile<Format, RA, n>(nb, a, next, b, out); });
    store_tile<RA>(out, std::min<int64_t>(RA, M - i), nr, C + j * ldc + i, ldc);
  }
}

// Prefill tiles: 3 weight rows x 6 activation rows, so each unpacked group feeds six dot products
// and each prepared activation group three. Of the tiles measured with kernels_bench at the 250M
// model's shapes (2 x 4, 2 x 6, 2 x 8, 3 x 5, 3 x 6, 3 x 8, 4 x 4, 4 x 6), three rows were fastest
// for every format, 3 x 6 by a little: 12-17 % over 2 x 4 for q4_K and iq4_nl, though its 18
// accumulators and three unpacked groups spill.
constexpr int kPrefillRows = 3, kPrefillCols = 6;

// The GemmFn of Format (kernels.h contract).
template <typename Format>
void gemm_codes(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  const int64_t nb = K / (Format::kBlocks32 ? kQK : kQK_K);
  const int64_t groups = (nb + kBlocksPerGroup<Format> - 1) / kBlocksPerGroup<Format>;
  AlignedArray<PreparedGroup> owned;
  PreparedGroup* prepared = call_scratch<PreparedGroup, Format>(static_cast<size_t>(N * groups), owned);
  if (prepared == nullptr) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t j = 0; j < N; ++j) prepare_row<Format>(row_at<uint8_t>(B, j, ldb), nb, prepared + j * groups);
  // Decode: one weight row at a time, a single read stream in address order. Otherwise tiles of
  // kPrefillRows weight rows x kPrefillCols activation rows.
  if (N == 1) {
    for (int64_t i = 0; i < M; ++i) codes_rows<Format, 1, 1>(nb, i, M, N, A, lda, prepared, groups, C, ldc);
    return;
  }
  for (int64_t i = 0; i < M; i += kPrefillRows)
    codes_rows<Format, kPrefillRows, kPrefillCols>(nb, i, M, N, A, lda, prepared, groups, C, ldc);
}

}  // namespace
}  // namespace tensorpc::cpu
