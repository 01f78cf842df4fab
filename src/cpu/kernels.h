// Row and tile kernels for the CPU device, one table per instruction set, chosen at run time.
//
// Every table computes the same math; SIMD tables differ from "portable" only by float
// summation order (and q8_0 quantization ties, see quantize_row_q8_0). Callers pick one with
// best_kernels() and split work across threads themselves: each gemm call is single-threaded
// and does its own cache blocking over K and N, so a caller can hand it [M_chunk x N].
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensorpc/dtype.h"

namespace tensorpc::cpu {

// C[j * ldc + i] = sum_k A_i[k] * B_j[k]  for i < M, j < N, where
//   A_i = (const char*)A + i * lda  is a row of K weights in the weight type, and
//   B_j = (const char*)B + j * ldb  is a row of K activations in the vec-dot type.
// lda/ldb are byte strides, ldc counts floats. C is overwritten, not accumulated into.
using GemmFn = void (*)(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                        size_t ldc);

struct KernelTable {
  const char* name;  // "portable", "avx2", "avx512"

  // Quantizes n floats (n % 32 == 0) into n/32 BlockQ8_0 (activations for gemm_q8_0/q4_0).
  // Bytes equal quantize_row_q8_0_ref's except where x/d lands exactly on .5: the SIMD tables
  // round such ties to even instead of away from zero (one quantization step at most).
  void (*quantize_row_q8_0)(const float* x, void* y, int64_t n);

  GemmFn gemm_f32;   // A f32,        B f32
  GemmFn gemm_f16;   // A f16,        B f32
  GemmFn gemm_q8_0;  // A BlockQ8_0,  B BlockQ8_0 (K % 32 == 0)
  GemmFn gemm_q4_0;  // A BlockQ4_0,  B BlockQ8_0 (K % 32 == 0)
  // The quantized kernels assume activation quants lie in [-127, 127], which every quantizer
  // here produces (-128 never occurs).

  // Quantizes n floats (n % 256 == 0) into n/256 BlockQ8_K (activations of the K kernels),
  // with the same tie rule as quantize_row_q8_0.
  void (*quantize_row_q8_K)(const float* x, void* y, int64_t n) = nullptr;
  GemmFn gemm_bf16 = nullptr; // A bf16,         B f32
  GemmFn gemm_q4_1 = nullptr; // A BlockQ4_1,    B BlockQ8_0 (K % 32 == 0)
  GemmFn gemm_q5_0 = nullptr; // A BlockQ5_0,    B BlockQ8_0
  GemmFn gemm_q5_1 = nullptr; // A BlockQ5_1,    B BlockQ8_0
  GemmFn gemm_iq4_nl = nullptr; // A BlockIQ4_NL,  B BlockQ8_0
  GemmFn gemm_q2_K = nullptr; // A BlockQ2_K,    B BlockQ8_K (K % 256 == 0)
  GemmFn gemm_q3_K = nullptr; // A BlockQ3_K,    B BlockQ8_K
  GemmFn gemm_q4_K = nullptr; // A BlockQ4_K,    B BlockQ8_K
  GemmFn gemm_q5_K = nullptr; // A BlockQ5_K,    B BlockQ8_K
  GemmFn gemm_q6_K = nullptr; // A BlockQ6_K,    B BlockQ8_K
  GemmFn gemm_iq4_xs = nullptr; // A BlockIQ4_XS,  B BlockQ8_K
  GemmFn gemm_mxfp4 = nullptr;  // A BlockMXFP4,   B BlockQ8_0 (K % 32 == 0)
};

// The gemm for weights of `type` in `table` (null when the type has none: i32, q8_K), and
// the type its activations must be converted to (f32, q8_0 or q8_K).
GemmFn gemm_for(const KernelTable& table, DType type);
DType vec_dot_type(DType weights);
// Quantizes n floats into `type` (q8_0 or q8_K) with the table's activation quantizer.
void quantize_activations(const KernelTable& table, DType type, const float* x, void* y, int64_t n);

const KernelTable& portable_kernels();
const KernelTable* avx2_kernels();    // nullptr unless compiled in and the CPU has avx2+fma+f16c
const KernelTable* avx512_kernels();  // nullptr unless compiled in and the CPU has avx512f/bw/vl/dq+vnni
// The best table the running CPU supports. TENSORPC_KERNELS=portable|avx2|avx512 selects a
// lower one (asking for an unsupported one falls back to the best available).
const KernelTable& best_kernels();

}  // namespace tensorpc::cpu
