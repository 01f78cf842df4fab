// The float GEMM machinery of the "avx512" table, for weights that widen to f32 on load
// (f32/f16/bf16): a dot-product kernel for small N and a register-tiled kernel for large N
// (the scheme is described at the top of kernels_avx512.cpp).
//
// Include only from files compiled with the avx512 flags (src/CMakeLists.txt). Like aligned.h,
// everything has internal linkage, so no other instruction set's build of a helper can be
// linked in.
//
// A weight format plugs in through a Load: one 16-float vector (whole or masked) from its
// element type T. gemm_float<Load> picks the kernel by N.
//
// kernels_avx512.cpp still holds its own copy of this code for f32/f16; it should include this
// header instead.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "cpu/aligned.h"
#include "cpu/kernels_avx512_sums.h"

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

template <typename Load>
void gemm_small_n(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                  size_t ldc) {
  using T = typename Load::T;
  constexpr int RM = 4;
  float out[4 * RM];
  for (int64_t i = 0; i < M; i += RM) {
    const int64_t mr = std::min<int64_t>(RM, M - i);
    const T* a[RM];
    for (int r = 0; r < RM; ++r) a[r] = row_at<T>(A, i + std::min<int64_t>(r, mr - 1), lda);
    for (int64_t j = 0; j < N; j += 4) {
      const int64_t nr = std::min<int64_t>(4, N - j);
      const float* b[4];
      for (int c = 0; c < 4; ++c) b[c] = row_at<float>(B, j + std::min<int64_t>(c, nr - 1), ldb);
      switch (nr) {
        case 1: dot_tile<RM, 1, Load>(K, a, b, out); break;
        case 2: dot_tile<RM, 2, Load>(K, a, b, out); break;
        case 3: dot_tile<RM, 3, Load>(K, a, b, out); break;
        default: dot_tile<RM, 4, Load>(K, a, b, out); break;
      }
      for (int64_t c = 0; c < nr; ++c)
        for (int64_t r = 0; r < mr; ++r) C[(j + c) * ldc + i + r] = out[c * RM + r];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Register-tiled kernel for larger N: B packed once per call into K x 64 column panels; each
// micro-kernel call multiplies 6 weight rows (widened to f32 just before use) by a panel slice.

constexpr int kTileMR = 6;                 // weight rows per micro-kernel (24 zmm accumulators)
constexpr int kTilePanel = 64;             // activation columns per packed panel (4 zmm)
constexpr int64_t kTileKC = 128;           // k-steps per panel slice: 32 KiB of panel in L1
constexpr int64_t kTileMC = 16 * kTileMR;  // weight rows sharing one panel slice
constexpr int64_t kTileSmallN = 8;         // below this, the dot-product kernels win

template <int NV>
void micro_tile(int64_t kc, const float (*a)[kTileKC], const float* panel, float* tile, bool accumulate) {
  __m512 acc[kTileMR][NV];
  for (int r = 0; r < kTileMR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_load_ps(tile + r * kTilePanel + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, panel += kTilePanel) {
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

// panels[p][k][0..64): column c of panel p is activation row p*64 + c, zero-padded.
inline AlignedArray<float> pack_panels(int64_t K, int64_t N, const void* B, size_t ldb) {
  const int64_t npanels = (N + kTilePanel - 1) / kTilePanel;
  auto panels = make_aligned<float>(static_cast<size_t>(npanels * K * kTilePanel));
  if (!panels) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t p = 0; p < npanels; ++p) {
    float* dst = panels.get() + p * K * kTilePanel;
    const int64_t w = std::min<int64_t>(kTilePanel, N - p * kTilePanel);
    if (w < kTilePanel) std::memset(dst, 0, sizeof(float) * K * kTilePanel);
    for (int64_t c = 0; c < w; ++c) {
      const float* src = row_at<float>(B, p * kTilePanel + c, ldb);
      for (int64_t k = 0; k < K; ++k) dst[k * kTilePanel + c] = src[k];
    }
  }
  return panels;
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
void gemm_tiled(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  const auto panels = pack_panels(K, N, B, ldb);
  auto tile = make_aligned<float>(kTileMC * kTilePanel);
  auto rows = make_aligned<float[kTileKC]>(kTileMR);
  if (!tile || !rows) throw std::bad_alloc();
  for (int64_t i0 = 0; i0 < M; i0 += kTileMC) {
    const int64_t mc = std::min(kTileMC, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += kTilePanel) {
      const int64_t w = std::min<int64_t>(kTilePanel, N - j0);
      const float* panel = panels.get() + (j0 / kTilePanel) * K * kTilePanel;
      for (int64_t k0 = 0; k0 < K; k0 += kTileKC) {
        const int64_t kc = std::min(kTileKC, K - k0);
        for (int64_t ir = 0; ir < mc; ir += kTileMR) {
          // Rows past M repeat the last row; their results land in unused tile rows.
          widen_rows<Load>(A, lda, i0 + ir, M - 1, k0, kc, rows.get());
          float* t = tile.get() + ir * kTilePanel;
          const float* p = panel + k0 * kTilePanel;
          switch ((w + 15) / 16) {
            case 1: micro_tile<1>(kc, rows.get(), p, t, k0 > 0); break;
            case 2: micro_tile<2>(kc, rows.get(), p, t, k0 > 0); break;
            case 3: micro_tile<3>(kc, rows.get(), p, t, k0 > 0); break;
            default: micro_tile<4>(kc, rows.get(), p, t, k0 > 0); break;
          }
        }
      }
      for (int64_t c = 0; c < w; ++c)
        for (int64_t r = 0; r < mc; ++r) C[(j0 + c) * ldc + i0 + r] = tile[r * kTilePanel + c];
    }
  }
}

template <typename Load>
void gemm_float(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  if (N < kTileSmallN) return gemm_small_n<Load>(K, M, N, A, lda, B, ldb, C, ldc);
  gemm_tiled<Load>(K, M, N, A, lda, B, ldb, C, ldc);
}

}  // namespace
}  // namespace tensorpc::cpu
