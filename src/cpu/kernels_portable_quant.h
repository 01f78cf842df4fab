// The portable kernels of the formats kernels_portable_quant.cpp implements, for the tables to
// take: the portable table itself, and the SIMD tables for the entries they do not specialise.
#pragma once

#include "cpu/kernels.h"

namespace tensorpc::cpu {

// Sets quantize_row_q8_K, gemm_bf16 and the gemm of every format after q4_0 in `table`.
void add_portable_quant_kernels(KernelTable& table);

// bf16 weights widened a row at a time (kernels_portable.cpp, beside gemm_f16).
void gemm_bf16_portable(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb,
                        float* C, size_t ldc);

}  // namespace tensorpc::cpu
