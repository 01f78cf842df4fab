// Specification tests for the kernel-table entries of the GGUF formats beyond q8_0/q4_0: bf16,
// q4_1/q5_0/q5_1/iq4_nl (against q8_0 activations) and q2_K…q6_K/iq4_xs (against q8_K), and the
// q8_K activation quantizer, for every table this machine can run.
//
// The weights are random bytes with sane f16 scales patched in at their offsets (quant.h), so
// every bit pattern of the quants and of the packed sub-block scales occurs; the library's
// quantizers are deliberately not used. Each gemm is checked against a double-precision dot of
// the dequantized weights (the dtype's to_float) and the dequantized activations the table
// itself quantized, so the reference is exact up to the kernel's float summation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/kernels.h"
#include "tensorpc/dtype.h"

namespace tensorpc {
namespace {

const cpu::KernelTable* table_named(const std::string& name) {
  if (name == "portable") return &cpu::portable_kernels();
  if (name == "avx2") return cpu::avx2_kernels();
  return cpu::avx512_kernels();
}

// The offsets of the f16 scales (d, m, dmin) inside one block of each format: the only bytes
// that may not be random (a random f16 can be inf or NaN, or scale values out of float range).
struct FormatSpec {
  DType type;
  std::vector<size_t> f16_fields;
};

const std::vector<FormatSpec>& new_formats() {
  static const std::vector<FormatSpec> specs = {
      {DType::bf16, {}},
      {DType::q4_1, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}},
      {DType::q5_0, {offsetof(BlockQ5_0, d)}},
      {DType::q5_1, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}},
      {DType::iq4_nl, {offsetof(BlockIQ4_NL, d)}},
      {DType::q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}},
      {DType::q3_K, {offsetof(BlockQ3_K, d)}},
      {DType::q4_K, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}},
      {DType::q5_K, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}},
      {DType::q6_K, {offsetof(BlockQ6_K, d)}},
      {DType::iq4_xs, {offsetof(BlockIQ4_XS, d)}},
  };
  return specs;
}

// A scale of either sign with magnitude in [2^-9, 2^-5): normal in f16, and small enough that
// no dequantized value or product gets near float's range.
uint16_t random_scale(std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(1.0f, 16.0f);
  const float v = mag(rng) / 512.0f;
  return fp32_to_fp16(rng() % 2 ? v : -v);
}

// One row of K weights of `spec.type` as random bytes (see the file comment).
void fill_random_row(const FormatSpec& spec, int64_t K, std::mt19937& rng, uint8_t* row) {
  if (spec.type == DType::bf16) {
    // Random sign and mantissa, exponent 2^-4 .. 2^3: every mantissa pattern, no inf/NaN.
    for (int64_t k = 0; k < K; ++k) {
      const uint32_t bits = ((rng() & 1u) << 15) | ((123u + rng() % 8u) << 7) | (rng() & 0x7fu);
      const uint16_t h = static_cast<uint16_t>(bits);
      std::memcpy(row + 2 * k, &h, 2);
    }
    return;
  }
  const size_t bytes = block_bytes(spec.type);
  for (int64_t b = 0; b < K / block_size(spec.type); ++b) {
    uint8_t* block = row + b * bytes;
    for (size_t i = 0; i < bytes; ++i) block[i] = static_cast<uint8_t>(rng());
    for (size_t off : spec.f16_fields) {
      const uint16_t s = random_scale(rng);
      std::memcpy(block + off, &s, 2);
    }
  }
}

// One gemm problem. Rows are deliberately strided and misaligned (A and B start 2 bytes past
// an aligned address where the type allows it); padding bytes are 0xff so reading past a row
// changes the result, and C's padding must stay untouched.
struct QuantGemmProblem {
  DType type, act_type;
  int64_t K, M, N;
  size_t lda, ldb, ldc;
  std::vector<uint8_t> A_storage, B_storage;
  uint8_t *A, *B;
  std::vector<double> a_values, b_values;  // what the kernel should multiply, row-major
  std::vector<float> C;

  QuantGemmProblem(const cpu::KernelTable& t, const FormatSpec& spec, int64_t k, int64_t m, int64_t n, uint32_t seed)
      : type(spec.type), act_type(cpu::vec_dot_type(spec.type)), K(k), M(m), N(n) {
    std::mt19937 rng(seed);
    const size_t a_row = row_bytes(type, K), b_row = row_bytes(act_type, K);
    const size_t a_align = storage_alignment(type), b_align = storage_alignment(act_type);
    lda = a_row + 17 * a_align;  // an odd multiple: breaks any wider alignment
    ldb = b_row + 9 * b_align;
    ldc = M + 3;
    A_storage.assign(lda * M + 64, 0xff);
    B_storage.assign(ldb * N + 64, 0xff);
    A = A_storage.data() + (a_align == 2 ? 2 : 0);
    B = B_storage.data() + (b_align == 4 ? 4 : 0);

    a_values.resize(M * K);
    std::vector<float> tmp(K);
    std::vector<uint8_t> row(a_row);
    for (int64_t i = 0; i < M; ++i) {
      fill_random_row(spec, K, rng, row.data());
      std::memcpy(A + i * lda, row.data(), a_row);
      traits(type).to_float(row.data(), tmp.data(), K);
      for (int64_t j = 0; j < K; ++j) a_values[i * K + j] = tmp[j];
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> xs(N * K);
    for (float& v : xs) v = normal(rng);
    set_activations(t, xs);
    C.assign(ldc * N, -12345.0f);
  }

  // Replaces the activations with xs (N rows of K floats), quantized by the table under test.
  void set_activations(const cpu::KernelTable& t, const std::vector<float>& xs) {
    b_values.resize(N * K);
    const size_t b_row = row_bytes(act_type, K);
    std::vector<uint8_t> row(b_row);
    std::vector<float> tmp(K);
    for (int64_t j = 0; j < N; ++j) {
      const float* x = xs.data() + j * K;
      if (act_type == DType::f32) {
        std::memcpy(row.data(), x, b_row);
      } else {
        cpu::quantize_activations(t, act_type, x, row.data(), K);
      }
      std::memcpy(B + j * ldb, row.data(), b_row);
      traits(act_type).to_float(row.data(), tmp.data(), K);
      for (int64_t k = 0; k < K; ++k) b_values[j * K + k] = tmp[k];
    }
  }

  void run(const cpu::KernelTable& t) {
    const cpu::GemmFn fn = cpu::gemm_for(t, type);
    ASSERT_NE(fn, nullptr) << name_of(type);
    fn(K, M, N, A, lda, B, ldb, C.data(), ldc);
  }

  // C against sum a*b in double; the tolerance is relative to sum |a||b|.
  void expect_matches_reference(double rel_tol) const {
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t i = 0; i < M; ++i) {
        double sum = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          sum += a_values[i * K + k] * b_values[j * K + k];
          mag += std::fabs(a_values[i * K + k] * b_values[j * K + k]);
        }
        ASSERT_NEAR(C[j * ldc + i], sum, rel_tol * mag + 1e-30) << "i=" << i << " j=" << j;
      }
      for (size_t i = M; i < ldc; ++i) ASSERT_EQ(C[j * ldc + i], -12345.0f) << "C padding written, j=" << j;
    }
  }
};

// Sums of 32-value formats run over up to 88 blocks in float, K formats over 11 super-blocks;
// the min terms of q4_1/q2_K/q4_K/q5_K cancel part of the scale terms. 2e-5 leaves room for
// both and still catches any wrong quant, scale or offset (those err by >= 1e-3).
constexpr double kRelTol = 2e-5;

std::vector<int64_t> test_ks(DType type) {
  if (type == DType::bf16) return {1, 17, 32, 96, 100, 2816};
  if (block_size(type) == kQK_K) return {256, 512, 2816};
  return {32, 96, 2816};
}

class KernelQuantTable : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = table_named(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << GetParam() << " kernels are not available on this CPU";
  }
  const cpu::KernelTable* table_ = nullptr;
};

TEST_P(KernelQuantTable, EveryNewFormatHasAKernelAndQ8_KHasAQuantizer) {
  ASSERT_NE(table_->quantize_row_q8_K, nullptr);
  for (const FormatSpec& spec : new_formats())
    EXPECT_NE(cpu::gemm_for(*table_, spec.type), nullptr) << name_of(spec.type);
}

TEST_P(KernelQuantTable, GemmMatchesDoublePrecisionReferenceOnDequantizedValues) {
  uint32_t seed = 1;
  for (const FormatSpec& spec : new_formats()) {
    for (int64_t K : test_ks(spec.type)) {
      for (int64_t M : {1, 3, 7, 33}) {
        for (int64_t N : {1, 2, 3, 5, 17, 64}) {
          SCOPED_TRACE(std::string(name_of(spec.type)) + " K=" + std::to_string(K) + " M=" + std::to_string(M) +
                       " N=" + std::to_string(N));
          QuantGemmProblem p(*table_, spec, K, M, N, seed++);
          p.run(*table_);
          p.expect_matches_reference(kRelTol);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(KernelQuantTable, GemmHandlesManyRowsAndColumnsAtOnce) {
  // More rows and columns than any register tile, with partial tiles on both sides.
  uint32_t seed = 5000;
  for (const FormatSpec& spec : new_formats()) {
    const int64_t K = block_size(spec.type) == kQK_K ? 768 : 160;
    SCOPED_TRACE(name_of(spec.type));
    QuantGemmProblem p(*table_, spec, K, 130, 70, seed++);
    p.run(*table_);
    p.expect_matches_reference(kRelTol);
    if (HasFatalFailure()) return;
  }
}

TEST_P(KernelQuantTable, ExtremeActivationsDoNotOverflowIntegerDotProducts) {
  // Activation quants of +-127 everywhere (every value of a row has the same magnitude), in
  // three sign patterns, against weights whose random bytes include every extreme quant: a
  // kernel whose 16-bit pair sums saturate (maddubs) gets these wrong.
  const int64_t K = 2816;
  uint32_t seed = 9000;
  for (const FormatSpec& spec : new_formats()) {
    if (spec.type == DType::bf16) continue;
    SCOPED_TRACE(name_of(spec.type));
    QuantGemmProblem p(*table_, spec, K, 9, 3, seed++);
    std::vector<float> xs(p.N * K);
    for (int64_t k = 0; k < K; ++k) {
      xs[k] = 1.0f;                                     // all positive
      xs[K + k] = -1.0f;                                // all negative
      xs[2 * K + k] = (k / 2) % 2 == 0 ? 1.0f : -1.0f;  // pairs of each sign
    }
    p.set_activations(*table_, xs);
    p.run(*table_);
    p.expect_matches_reference(kRelTol);
    if (HasFatalFailure()) return;
  }
}

TEST_P(KernelQuantTable, QuantizeQ8_KMatchesTheReferenceUpToRoundingTiesWithExactBsums) {
  const int64_t n = kQK_K * 24;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (int i = 256; i < 512; ++i) x[i] = 0.0f;  // an all-zero super-block
  x[600] = 0.0f;
  // A super-block with d = 127 / 127 = 1 exactly, so every x + .5 is a rounding tie.
  for (int i = 768; i < 1024; ++i) x[i] = static_cast<float>(i % 20) - 9.5f;
  x[800] = 127.0f;
  for (int i = 1024; i < 1280; ++i) x[i] = 1e-30f * static_cast<float>(i % 7 - 3);  // tiny values
  std::vector<BlockQ8_K> got(n / kQK_K), want(n / kQK_K);
  table_->quantize_row_q8_K(x.data(), got.data(), n);
  quantize_row_q8_K_ref(x.data(), want.data(), n);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    SCOPED_TRACE("super-block " + std::to_string(b));
    ASSERT_EQ(std::memcmp(&got[b].d, &want[b].d, sizeof(float)), 0) << got[b].d << " vs " << want[b].d;
    const float inv = want[b].d != 0.0f ? 1.0f / want[b].d : 0.0f;
    for (int i = 0; i < kQK_K; ++i) {
      if (got[b].qs[i] == want[b].qs[i]) continue;
      // Only a tie may differ, and then by one step, to the even neighbour.
      const float scaled = x[b * kQK_K + i] * inv;
      ASSERT_EQ(std::fabs(scaled - std::trunc(scaled)), 0.5f) << "i=" << i << " x=" << x[b * kQK_K + i];
      ASSERT_EQ(std::abs(got[b].qs[i] - want[b].qs[i]), 1) << "i=" << i;
      ASSERT_EQ(got[b].qs[i] % 2, 0) << "i=" << i;
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) sum += got[b].qs[i];
      ASSERT_EQ(got[b].bsums[j], sum) << "bsums[" << j << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KernelQuant, KernelQuantTable, ::testing::Values("portable", "avx2", "avx512"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tensorpc
