// The float GEMM machinery of the "avx2" table, for weights that widen to f32 on load
// (f32/f16/bf16): a dot-product kernel for small N and a register-tiled kernel for large N; and
// hsum and hmax, which the quantized kernels and activation quantizers use too.
//
// Include only from files compiled with -mavx2 -mfma -mf16c. Like aligned.h, everything has
// internal linkage, so no other instruction set's build of a helper can be linked in.
//
// A weight format plugs in twice: a Load (one 8-float vector, and one scalar for the tail of K)
// for gemm_small_n, and a Rows source (kMR row pointers of f32 for one K slice, converting
// into its own buffer if needed) for gemm_tiled.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "cpu/aligned.h"

namespace tensorpc::cpu {
namespace {

// inline: a file may use only part of this header without unused-function warnings.
inline float hsum(__m256 v) {
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s4, _mm_movehdup_ps(s4)));
}

inline float hmax(__m256 v) {
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

// ---------------------------------------------------------------------------------------------
// Dot products for small N: RM weight rows x RN activation columns along K.

template <int RM, int RN, typename Load>
void dot_tile(int64_t K, const typename Load::T* const* a, const float* const* b, float* out) {
  __m256 acc[RM][RN];
  for (int r = 0; r < RM; ++r)
    for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 bv[RN];
    for (int c = 0; c < RN; ++c) bv[c] = _mm256_loadu_ps(b[c] + k);
    for (int r = 0; r < RM; ++r) {
      const __m256 av = Load::load(a[r] + k);
      for (int c = 0; c < RN; ++c) acc[r][c] = _mm256_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
  for (int c = 0; c < RN; ++c)
    for (int r = 0; r < RM; ++r) {
      float sum = hsum(acc[r][c]);
      for (int64_t t = k; t < K; ++t) sum += Load::scalar(a[r] + t) * b[c][t];
      out[c * RM + r] = sum;
    }
}

template <typename Load>
void gemm_small_n(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                  size_t ldc) {
  constexpr int RM = 4;
  float out[2 * RM];
  for (int64_t i = 0; i < M; i += RM) {
    const int64_t mr = std::min<int64_t>(RM, M - i);
    const typename Load::T* a[RM];
    for (int r = 0; r < RM; ++r) a[r] = row_at<typename Load::T>(A, i + std::min<int64_t>(r, mr - 1), lda);
    for (int64_t j = 0; j < N; j += 2) {
      const int64_t nr = std::min<int64_t>(2, N - j);
      const float* b[2] = {row_at<float>(B, j, ldb), row_at<float>(B, j + nr - 1, ldb)};
      if (nr == 1)
        dot_tile<RM, 1, Load>(K, a, b, out);
      else
        dot_tile<RM, 2, Load>(K, a, b, out);
      for (int64_t c = 0; c < nr; ++c)
        for (int64_t r = 0; r < mr; ++r) C[(j + c) * ldc + i + r] = out[c * RM + r];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Register-tiled kernel for larger N.

constexpr int kMR = 6;             // weight rows per micro-kernel (6 x 2 ymm = 12 accumulators)
constexpr int kPanel = 16;         // activation columns per packed panel (2 ymm)
constexpr int64_t kKC = 256;       // k-steps per panel slice: 256 x 16 floats = 16 KiB in L1
constexpr int64_t kMC = 16 * kMR;  // weight rows sharing one panel slice
constexpr int64_t kSmallN = 4;     // below this, the dot-product kernels win

template <int NV>
void micro_f32(int64_t kc, const float* const* a, const float* panel, float* tile, bool accumulate) {
  __m256 acc[kMR][NV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm256_load_ps(tile + r * kPanel + 8 * v) : _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, panel += kPanel) {
    if ((k & 15) == 0) {
      // Pull the same rows' next slice towards L2 ahead of the call that needs it.
      for (int r = 0; r < kMR; ++r) _mm_prefetch(reinterpret_cast<const char*>(a[r] + k + kKC), _MM_HINT_T1);
    }
    __m256 bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_load_ps(panel + 8 * v);
    for (int r = 0; r < kMR; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a[r] + k);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < NV; ++v) _mm256_store_ps(tile + r * kPanel + 8 * v, acc[r][v]);
}

inline AlignedArray<float> pack_panels(int64_t K, int64_t N, const void* B, size_t ldb) {
  const int64_t npanels = (N + kPanel - 1) / kPanel;
  auto panels = make_aligned<float>(static_cast<size_t>(npanels * K * kPanel));
  if (!panels) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t p = 0; p < npanels; ++p) {
    float* dst = panels.get() + p * K * kPanel;
    const int64_t w = std::min<int64_t>(kPanel, N - p * kPanel);
    if (w < kPanel) std::memset(dst, 0, sizeof(float) * K * kPanel);
    for (int64_t c = 0; c < w; ++c) {
      const float* src = row_at<float>(B, p * kPanel + c, ldb);
      for (int64_t k = 0; k < K; ++k) dst[k * kPanel + c] = src[k];
    }
  }
  return panels;
}

template <typename Rows>
void gemm_tiled(Rows& src, int64_t K, int64_t M, int64_t N, const void* B, size_t ldb, float* C, size_t ldc) {
  const auto panels = pack_panels(K, N, B, ldb);
  auto tile = make_aligned<float>(kMC * kPanel);
  if (!tile) throw std::bad_alloc();
  const float* a[kMR];
  for (int64_t i0 = 0; i0 < M; i0 += kMC) {
    const int64_t mc = std::min(kMC, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
      const int64_t w = std::min<int64_t>(kPanel, N - j0);
      const float* panel = panels.get() + (j0 / kPanel) * K * kPanel;
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        for (int64_t ir = 0; ir < mc; ir += kMR) {
          // Rows past M repeat the last row; their results land in unused tile rows.
          src.rows(i0 + ir, M - 1, k0, kc, a);
          if (w > 8)
            micro_f32<2>(kc, a, panel + k0 * kPanel, tile.get() + ir * kPanel, k0 > 0);
          else
            micro_f32<1>(kc, a, panel + k0 * kPanel, tile.get() + ir * kPanel, k0 > 0);
        }
      }
      for (int64_t c = 0; c < w; ++c)
        for (int64_t r = 0; r < mc; ++r) C[(j0 + c) * ldc + i0 + r] = tile[r * kPanel + c];
    }
  }
}

}  // namespace
}  // namespace tensorpc::cpu
