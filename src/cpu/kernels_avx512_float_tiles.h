// The float GEMM machinery of the "avx512" table, for weights that widen to f32 on load
// (f32/f16/bf16): a dot-product kernel for small N and a register-tiled kernel for large N
// (the scheme is described at the top of kernels_avx512.cpp).
//
// Include only from files compiled with the avx512 flags (src/CMakeLists.txt). Like aligned.h,
// everything has internal linkage, so no other instruction set's build of a helper can be
// linked in.
//
// A weight format plugs in through a Load: one 16-float vector (whole or masked) from its
// element type T. gemm_float<Load> picks the kernel by N; the loops around the tiles are
// kernels_tile_loops.h's, shared with the "avx2" table.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "cpu/aligned.h"
#include "cpu/kernels_avx512_sums.h"
#include "cpu/kernels_tile_loops.h"

namespace tensorpc::cpu {
namespace {

// inline: a file may use only part of this header without unused-function warnings.
inline __mmask16 tail_mask16(int64_t remaining) { return static_cast<__mmask16>((1u << remaining) - 1u); }

struct LoadF32 {
  using T = float;
  static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 load_masked(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct LoadF16 {
  using T = uint16_t;
  static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }
};
// bf16 is the top half of an f32: widen to 32 bits and shift left by 16.
struct LoadBF16 {
  using T = uint16_t;
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint16_t* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_masked(const uint16_t* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
};

// ---------------------------------------------------------------------------------------------
// Dot products for small N: vectors run along K, RM weight rows x RN activation rows.

template <int RM, int RN, typename Load>
void dot_tile(int64_t K, const typename Load::T* const* a, const float* const* b, float* out /*[RN][RM]*/) {
  __m512 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 bv[RN];
    for (int c = 0; c < RN; ++c) bv[c] = _mm512_loadu_ps(b[c] + k);
    for (int r = 0; r < RM; ++r) {
      const __m512 av = Load::load(a[r] + k);
      for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
  if (k < K) {
    const __mmask16 m = tail_mask16(K - k);
    __m512 bv[RN];
    for (int c = 0; c < RN; ++c) bv[c] = _mm512_maskz_loadu_ps(m, b[c] + k);
    for (int r = 0; r < RM; ++r) {
      const __m512 av = Load::load_masked(a[r] + k, m);
      for (int c = 0; c < RN; ++c) acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) out[c * RM + r] = hsum_ps(acc[r][c]);
}

// ---------------------------------------------------------------------------------------------
// Register-tiled kernel for larger N: B packed once per call into K x 64 column panels; each
// micro-kernel call multiplies 6 weight rows (widened to f32 just before use) by a panel slice.

// 6 weight rows x 4 zmm per micro-kernel call (24 accumulators); 128 k-steps per slice of a
// 64-column panel (32 KiB in L1), shared by 16 calls' rows.
using TileBlocking = PanelBlocking<6, 16, 4, 128, 16 * 6>;
constexpr int kTileMR = TileBlocking::MR;
constexpr int kTilePanel = TileBlocking::Panel;
constexpr int64_t kTileKC = TileBlocking::KC;
constexpr int64_t kTileMC = TileBlocking::MC;
constexpr int64_t kTileSmallN = 8;  // below this, the dot-product kernels win

// tile[r][0..16*NV) (+)= sum_{k<kc} a[r][k] * panel[k][...], where a is either kTileMR pointers
// into f32 weight rows, read in place, or the buffer widen_rows filled.
// Kept out of line: inlined into gemm_panels' loops, a partial panel (N = 8 or 16) ran at half speed.
template <int NV, typename Rows>
__attribute__((noinline)) void micro_tile(int64_t kc, Rows a, const float* panel, float* tile, bool accumulate) {
  constexpr bool kInPlace = std::is_same_v<Rows, const float* const*>;
  __m512 acc[kTileMR][NV];
  for (int r = 0; r < kTileMR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_load_ps(tile + r * kTilePanel + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, panel += kTilePanel) {
    if constexpr (kInPlace) {
      if ((k & 15) == 0) {
        // The same rows' next slice is needed kTileMC/kTileMR calls from now; start pulling it into
        // L2 (weights stream from DRAM in short per-row runs the hardware prefetcher misses).
        for (int r = 0; r < kTileMR; ++r) _mm_prefetch(reinterpret_cast<const char*>(a[r] + k + kTileKC), _MM_HINT_T1);
      }
    }
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(panel + 16 * v);
    for (int r = 0; r < kTileMR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r][k]);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kTileMR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_store_ps(tile + r * kTilePanel + 16 * v, acc[r][v]);
}

// kTileMR rows [i0, i0 + kTileMR) (rows past `last` repeat it), k in [k0, k0 + kc), as f32.
template <typename Load>
void widen_rows(const void* A, size_t lda, int64_t i0, int64_t last, int64_t k0, int64_t kc, float (*buf)[kTileKC]) {
  for (int r = 0; r < kTileMR; ++r) {
    const typename Load::T* src = row_at<typename Load::T>(A, std::min(i0 + r, last), lda) + k0;
    // The same rows' next slice is needed kTileMC/kTileMR calls from now; pull it towards L2.
    _mm_prefetch(reinterpret_cast<const char*>(src + kTileKC), _MM_HINT_T1);
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) _mm512_store_ps(buf[r] + k, Load::load(src + k));
    if (k < kc) _mm512_store_ps(buf[r] + k, Load::load_masked(src + k, tail_mask16(kc - k)));
  }
}

template <typename Load>
void gemm_float(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  using T = typename Load::T;
  if (N < kTileSmallN) {  // dot products: tiles of 4 weight rows x up to 4 activation rows
    return gemm_tiles<4, 4, T, float>(M, N, A, lda, B, ldb, C, ldc,
                                      [K](auto n, const T* const* a, const float* const* b, int64_t, float* out) {
                                        dot_tile<4, n, Load>(K, a, b, out);
                                      });
  }
  if constexpr (std::is_same_v<T, float>) {
    // f32 weights need no widening: the micro-kernel reads their rows in place.
    const float* a[kTileMR];
    return gemm_panels<TileBlocking>(
        K, M, N, B, ldb, C, ldc,
        [&](int64_t i0, int64_t last, int64_t k0, int64_t) {
          tile_rows<kTileMR>(A, i0, last, lda, a);
          for (const float*& row : a) row += k0;
          return static_cast<const float* const*>(a);
        },
        [](auto nv, const float* const* rows, int64_t kc, const float* panel, float* tile, bool accumulate) {
          micro_tile<nv>(kc, rows, panel, tile, accumulate);
        });
  }
  auto rows = make_aligned<float[kTileKC]>(kTileMR);
  if (!rows) throw std::bad_alloc();
  gemm_panels<TileBlocking>(
      K, M, N, B, ldb, C, ldc,
      [&](int64_t i0, int64_t last, int64_t k0, int64_t kc) {
        widen_rows<Load>(A, lda, i0, last, k0, kc, rows.get());
        return static_cast<const float(*)[kTileKC]>(rows.get());
      },
      [](auto nv, const float(*a)[kTileKC], int64_t kc, const float* panel, float* tile, bool accumulate) {
        micro_tile<nv>(kc, a, panel, tile, accumulate);
      });
}

}  // namespace
}  // namespace tensorpc::cpu
