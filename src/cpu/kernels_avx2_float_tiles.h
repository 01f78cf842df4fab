// The float GEMM machinery of the "avx2" table, for weights that widen to f32 on load
// (f32/f16/bf16): a dot-product kernel for small N and a register-tiled kernel for large N; and
// hsum and hmax, which the quantized kernels and activation quantizers use too.
//
// Include only from files compiled with -mavx2 -mfma -mf16c. Like aligned.h, everything has
// internal linkage, so no other instruction set's build of a helper can be linked in.
//
// A weight format plugs in through a Load: one 8-float vector, and one scalar for the tail of K,
// from its element type T. gemm_float<Load> picks the kernel by N; the loops around the tiles are
// kernels_tile_loops.h's, shared with the "avx512" table.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <memory>
#include <type_traits>

#include "core/float16.h"
#include "cpu/aligned.h"
#include "cpu/kernels_tile_loops.h"

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

struct LoadF32 {
  using T = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float scalar(const float* p) { return *p; }
};
struct LoadF16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float scalar(const uint16_t* p) { return fp16_to_fp32(*p); }
};
// bf16 is the top half of an f32: widen to 32 bits and shift left by 16.
struct LoadBF16 {
  using T = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float scalar(const uint16_t* p) {
    const uint32_t bits = uint32_t{*p} << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

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

// ---------------------------------------------------------------------------------------------
// Register-tiled kernel for larger N.

// 6 weight rows x 2 ymm per micro-kernel call (12 accumulators); 256 k-steps per slice of a
// 16-column panel (256 x 16 floats = 16 KiB in L1), shared by 16 calls' rows.
using Blocking = PanelBlocking<6, 8, 2, 256, 16 * 6>;
constexpr int kMR = Blocking::MR;
constexpr int kPanel = Blocking::Panel;
constexpr int64_t kKC = Blocking::KC;
constexpr int64_t kSmallN = 4;  // below this, the dot-product kernels win

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

// kMR f32 row pointers for one K slice: f32 weights as they are, other types widened by Load
// into the source's own buffer.
template <typename Load>
struct PanelRows {
  const void* A;
  size_t lda;
  const float* ptr[kMR];
  alignas(32) float buf[std::is_same_v<typename Load::T, float> ? 1 : kMR][kKC];
  const float* const* rows(int64_t i0, int64_t last, int64_t k0, int64_t kc) {
    const typename Load::T* src[kMR];
    tile_rows<kMR>(A, i0, last, lda, src);
    for (int r = 0; r < kMR; ++r) {
      if constexpr (std::is_same_v<typename Load::T, float>) {
        ptr[r] = src[r] + k0;
      } else {
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) _mm256_store_ps(buf[r] + k, Load::load(src[r] + k0 + k));
        for (; k < kc; ++k) buf[r][k] = Load::scalar(src[r] + k0 + k);
        ptr[r] = buf[r];
      }
    }
    return ptr;
  }
};

// The GemmFn of weights that Load widens to f32 (kernels.h contract).
template <typename Load>
void gemm_float(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                size_t ldc) {
  using T = typename Load::T;
  if (N < kSmallN) {  // dot products: tiles of 4 weight rows x up to 2 activation rows
    return gemm_tiles<4, 2, T, float>(M, N, A, lda, B, ldb, C, ldc,
                                      [K](auto n, const T* const* a, const float* const* b, int64_t, float* out) {
                                        dot_tile<4, n, Load>(K, a, b, out);
                                      });
  }
  auto src = std::make_unique<PanelRows<Load>>();  // 6 KiB of buffer: not on the stack
  src->A = A;
  src->lda = lda;
  gemm_panels<Blocking>(
      K, M, N, B, ldb, C, ldc,
      [&](int64_t i0, int64_t last, int64_t k0, int64_t kc) { return src->rows(i0, last, k0, kc); },
      [](auto nv, const float* const* a, int64_t kc, const float* panel, float* tile, bool accumulate) {
        micro_f32<nv>(kc, a, panel, tile, accumulate);
      });
}

}  // namespace
}  // namespace tensorpc::cpu
