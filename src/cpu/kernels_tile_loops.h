// The loops around the SIMD tables' register tiles (kernels_avx2*.cpp, kernels_avx512*.cpp): which
// weight rows and activation rows a tile reads, how a partial tile picks its compile-time size,
// and the blocking of the float GEMMs over packed activation panels. Only the tile bodies
// differ between instruction sets; they come in as callables.
//
// Free of intrinsics, like aligned.h, and for the same reason everything has internal linkage:
// each kernel file keeps its own copy, built for its own instruction set, so the linker can
// never hand the AVX-512 build of a loop to the AVX2 table.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "cpu/aligned.h"

namespace tensorpc::cpu {
namespace {

// Calls fn(std::integral_constant<int, n>) for n = min(count, Max), count >= 1: a partial tile
// runs the instantiation of its own size, chosen by one compare per size.
template <int Max, typename Fn>
inline void with_count(int64_t count, Fn&& fn) {
  if constexpr (Max > 1) {
    if (count < Max) return with_count<Max - 1>(count, fn);
  }
  fn(std::integral_constant<int, Max>{});
}

// out[r] = row first + r of rows `stride` bytes apart, r < R; rows past `last` repeat it, so a
// partial tile computes duplicates that its caller does not store.
template <int R, typename T>
inline void tile_rows(const void* base, int64_t first, int64_t last, size_t stride, const T** out) {
  for (int r = 0; r < R; ++r) out[r] = row_at<T>(base, std::min(first + r, last), stride);
}

// Decode (N = 1): fn(i) for each weight row in address order, the rows about 2 KiB ahead
// prefetched first (prefetch_rows_ahead), so that the weights stream as one read.
template <typename Fn>
inline void for_each_streamed_row(const void* A, size_t lda, int64_t M, Fn&& fn) {
  for (int64_t i = 0; i < M; ++i) {
    prefetch_rows_ahead(A, i, 1, M, lda);
    fn(i);
  }
}

// C[j * ldc + i] for all M weight rows x N activation rows, in register tiles of RA weight rows
// (TA, lda bytes apart) by up to CB activation rows (TB, ldb bytes apart):
// tile(n, a, b, j, out) fills out[c * RA + r] for the n (a std::integral_constant) activation
// rows b[0..n) from row j on, and the weight rows a[0..RA).
template <int RA, int CB, typename TA, typename TB, typename Tile>
inline void gemm_tiles(int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C, size_t ldc,
                       Tile&& tile) {
  float out[RA * CB];
  for (int64_t i = 0; i < M; i += RA) {
    const TA* a[RA];
    tile_rows<RA>(A, i, M - 1, lda, a);
    for (int64_t j = 0; j < N; j += CB) {
      const int64_t nr = std::min<int64_t>(CB, N - j);
      const TB* b[CB];
      tile_rows<CB>(B, j, N - 1, ldb, b);
      with_count<CB>(nr, [&](auto n) { tile(n, a, b, j, out); });
      store_tile<RA>(out, std::min<int64_t>(RA, M - i), nr, C + j * ldc + i, ldc);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Float GEMM for larger N: B packed once per call into K x Panel column panels; each micro-kernel
// call multiplies MR weight rows by a panel slice of up to KC k-steps into a row-major tile of
// MC rows, which is transposed into C once the panel's K is done.

// panels[p][k][0..Panel): column c of panel p is activation row p * Panel + c, zero-padded.
template <int Panel>
inline AlignedArray<float> pack_panels(int64_t K, int64_t N, const void* B, size_t ldb) {
  const int64_t npanels = (N + Panel - 1) / Panel;
  auto panels = make_aligned<float>(static_cast<size_t>(npanels * K * Panel));
  if (!panels) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t p = 0; p < npanels; ++p) {
    float* dst = panels.get() + p * K * Panel;
    const int64_t w = std::min<int64_t>(Panel, N - p * Panel);
    if (w < Panel) std::memset(dst, 0, sizeof(float) * K * Panel);
    // 16 columns at a time, k by k: the writes stay sequential, the reads 16 streams.
    for (int64_t c0 = 0; c0 < w; c0 += 16) {
      const int64_t cw = std::min<int64_t>(16, w - c0);
      for (int64_t k = 0; k < K; ++k) {
        float* d = dst + k * Panel + c0;
        for (int64_t c = 0; c < cw; ++c) d[c] = row_at<float>(B, p * Panel + c0 + c, ldb)[k];
      }
    }
  }
  return panels;
}

// The register blocking of a float GEMM: MR weight rows per micro-kernel call, Panel activation
// columns per packed panel (NV vectors of Lanes floats), KC k-steps per panel slice, MC weight rows
// sharing one slice.
template <int MRv, int Lanesv, int NVv, int64_t KCv, int64_t MCv>
struct PanelBlocking {
  static constexpr int MR = MRv, Lanes = Lanesv, NV = NVv, Panel = Lanesv * NVv;
  static constexpr int64_t KC = KCv, MC = MCv;
};

// The panel GEMM's loops. rows(i0, last, k0, kc) readies weight rows [i0, i0 + MR) (rows past
// `last` repeating it) for k in [k0, k0 + kc) and returns what micro takes;
// micro(nv, a, kc, panel, tile, accumulate) runs nv (a std::integral_constant, the vectors that
// cover the panel's live columns) vectors per row: tile[r][...] (+)= sum_k a[r][k] * panel[k][...].
template <typename Blocking, typename Rows, typename Micro>
inline void gemm_panels(int64_t K, int64_t M, int64_t N, const void* B, size_t ldb, float* C, size_t ldc, Rows&& rows,
                        Micro&& micro) {
  constexpr int kPanel = Blocking::Panel;
  const auto panels = pack_panels<kPanel>(K, N, B, ldb);
  auto tile = make_aligned<float>(Blocking::MC * kPanel);
  if (!tile) throw std::bad_alloc();
  for (int64_t i0 = 0; i0 < M; i0 += Blocking::MC) {
    const int64_t mc = std::min(Blocking::MC, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
      const int64_t w = std::min<int64_t>(kPanel, N - j0);
      const float* panel = panels.get() + (j0 / kPanel) * K * kPanel;
      for (int64_t k0 = 0; k0 < K; k0 += Blocking::KC) {
        const int64_t kc = std::min(Blocking::KC, K - k0);
        for (int64_t ir = 0; ir < mc; ir += Blocking::MR) {
          // Rows past M repeat the last row; their results land in unused tile rows.
          const auto a = rows(i0 + ir, M - 1, k0, kc);
          with_count<Blocking::NV>((w + Blocking::Lanes - 1) / Blocking::Lanes, [&](auto nv) {
            micro(nv, a, kc, panel + k0 * kPanel, tile.get() + ir * kPanel, k0 > 0);
          });
        }
      }
      for (int64_t c = 0; c < w; ++c)
        for (int64_t r = 0; r < mc; ++r) C[(j0 + c) * ldc + i0 + r] = tile[r * kPanel + c];
    }
  }
}

}  // namespace
}  // namespace tensorpc::cpu
