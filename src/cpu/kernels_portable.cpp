// The "portable" kernel table: plain C++ that any compiler can build (and auto-vectorise).
// It is the fallback on CPUs without AVX2 and the baseline the SIMD tables are tested against.
#include <vector>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels.h"
#include "cpu/kernels_portable_quant.h"

namespace tensorpc::cpu {
namespace {

// Eight independent partial sums let the compiler vectorise without reassociating floats.
float dot_f32(const float* a, const float* b, int64_t K) {
  float acc[8] = {};
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[k + l] * b[k + l];
  float sum = 0.0f;
  for (int l = 0; l < 8; ++l) sum += acc[l];
  for (; k < K; ++k) sum += a[k] * b[k];
  return sum;
}

void quantize_q8_0(const float* x, void* y, int64_t n) { quantize_row_q8_0_ref(x, static_cast<BlockQ8_0*>(y), n); }

void gemm_f32(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
              size_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    const float* a = row_at<float>(A, i, lda);
    for (int64_t j = 0; j < N; ++j) C[j * ldc + i] = dot_f32(a, row_at<float>(B, j, ldb), K);
  }
}

void gemm_f16(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
              size_t ldc) {
  std::vector<float> a(static_cast<size_t>(K));  // one weight row widened once, reused for all j
  for (int64_t i = 0; i < M; ++i) {
    convert_row_f16_to_f32(row_at<uint16_t>(A, i, lda), a.data(), K);
    for (int64_t j = 0; j < N; ++j) C[j * ldc + i] = dot_f32(a.data(), row_at<float>(B, j, ldb), K);
  }
}

}  // namespace

void gemm_bf16_portable(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb,
                        float* C, size_t ldc) {
  std::vector<float> a(static_cast<size_t>(K));
  for (int64_t i = 0; i < M; ++i) {
    convert_row_bf16_to_f32(row_at<uint16_t>(A, i, lda), a.data(), K);
    for (int64_t j = 0; j < N; ++j) C[j * ldc + i] = dot_f32(a.data(), row_at<float>(B, j, ldb), K);
  }
}

namespace {

void gemm_q8_0(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
               size_t ldc) {
  const int64_t nb = K / kQK;
  for (int64_t i = 0; i < M; ++i) {
    const BlockQ8_0* a = row_at<BlockQ8_0>(A, i, lda);
    for (int64_t j = 0; j < N; ++j) {
      const BlockQ8_0* b = row_at<BlockQ8_0>(B, j, ldb);
      float sum = 0.0f;
      for (int64_t q = 0; q < nb; ++q) {
        int32_t dot = 0;
        for (int64_t t = 0; t < kQK; ++t) dot += int32_t{a[q].qs[t]} * int32_t{b[q].qs[t]};
        sum += fp16_to_fp32(a[q].d) * fp16_to_fp32(b[q].d) * static_cast<float>(dot);
      }
      C[j * ldc + i] = sum;
    }
  }
}

void gemm_q4_0(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
               size_t ldc) {
  const int64_t nb = K / kQK;
  for (int64_t i = 0; i < M; ++i) {
    const BlockQ4_0* a = row_at<BlockQ4_0>(A, i, lda);
    for (int64_t j = 0; j < N; ++j) {
      const BlockQ8_0* b = row_at<BlockQ8_0>(B, j, ldb);
      float sum = 0.0f;
      for (int64_t q = 0; q < nb; ++q) {
        int32_t dot = 0;
        for (int64_t t = 0; t < kQK / 2; ++t) {
          dot += ((a[q].qs[t] & 0x0f) - 8) * int32_t{b[q].qs[t]};
          dot += ((a[q].qs[t] >> 4) - 8) * int32_t{b[q].qs[t + kQK / 2]};
        }
        sum += fp16_to_fp32(a[q].d) * fp16_to_fp32(b[q].d) * static_cast<float>(dot);
      }
      C[j * ldc + i] = sum;
    }
  }
}

}  // namespace

const KernelTable& portable_kernels() {
  static const KernelTable table = [] {
    KernelTable t = {.name = "portable", .quantize_row_q8_0 = quantize_q8_0, .gemm_f32 = gemm_f32, .gemm_f16 = gemm_f16, .gemm_q8_0 = gemm_q8_0, .gemm_q4_0 = gemm_q4_0};
    add_portable_quant_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace tensorpc::cpu
