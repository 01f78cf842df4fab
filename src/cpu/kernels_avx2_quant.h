// The "avx2" table's kernels of the formats beyond f32/f16/q8_0/q4_0 (kernels_avx2_quant.cpp,
// kernels_avx2_q32.cpp, kernels_avx2_qk.cpp). Each function does nothing when the compiler
// cannot target AVX2 + FMA + F16C; avx2_kernels() then returns no table anyway.
#pragma once

namespace tensorpc::cpu {

struct KernelTable;

// Sets quantize_row_q8_K, gemm_bf16 and the gemm of every format after q4_0 in `table`.
void add_avx2_quant_kernels(KernelTable& table);

// The two families, for add_avx2_quant_kernels: q4_1/q5_0/q5_1/iq4_nl/mxfp4 against q8_0
// activations, and q2_K … q6_K/iq4_xs against q8_K activations.
void add_avx2_q32_kernels(KernelTable& table);
void add_avx2_qk_kernels(KernelTable& table);

}  // namespace tensorpc::cpu
