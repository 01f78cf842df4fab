// The "avx512" table's kernels of the formats beyond f32/f16/q8_0/q4_0 (kernels_avx512_quant.cpp,
// kernels_avx512_q32.cpp, kernels_avx512_qk.cpp). Each function does nothing when the compiler
// cannot target the avx512 set; avx512_kernels() then returns no table anyway.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorpc::cpu {

struct KernelTable;

// Sets quantize_row_q8_K, gemm_bf16 and the gemm of every format after q4_0 in `table`.
void add_avx512_quant_kernels(KernelTable& table);

// The two families, for add_avx512_quant_kernels: q4_1/q5_0/q5_1/iq4_nl/mxfp4 against q8_0
// activations, and q2_K … q6_K/iq4_xs against q8_K activations.
void add_avx512_q32_kernels(KernelTable& table);
void add_avx512_qk_kernels(KernelTable& table);

// q8_0 weights against N > 1 activation rows (a GemmFn), on the weight panels of the VNNI driver
// the formats above share (kernels_avx512_q32.cpp); kernels_avx512.cpp keeps decode. Defined only
// where the compiler targets the avx512 set, as is its one caller.
void gemm_q8_0_tiles(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                     size_t ldc);
// q4_0 weights the same way.
void gemm_q4_0_tiles(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                     size_t ldc);

}  // namespace tensorpc::cpu
