// Specification tests for the f16/bf16 conversions, the q8_0/q4_0 block codecs and every CPU
// kernel table this machine can run (each gemm against a double-precision reference).
#include "cpu/kernels.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/quant.h"

namespace tensorpc {
namespace {

// ---------------------------------------------------------------------------------------------
// f16

TEST(Float16, ConvertsExactlyRepresentableValuesExactly) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);  // largest finite half
  EXPECT_EQ(fp32_to_fp16(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_fp32(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
}

TEST(Float16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);             // tie, 0x3c00 is even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie, 0x3c02 is even
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);                    // below the overflow tie
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);                    // the tie rounds to inf
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);                    // subnormal tie, to even zero
  EXPECT_EQ(fp32_to_fp16(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2
  EXPECT_EQ(fp32_to_fp16(0x1p-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0x1p-30f), 0x8000);
}

TEST(Float16, KeepsInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_fp16(inf), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-inf), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fp16_to_fp32(0x7c00), inf);
  EXPECT_EQ(fp16_to_fp32(0xfc00), -inf);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));  // signalling payload stays NaN
  const uint16_t h = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(h & 0x7c00, 0x7c00);
  EXPECT_NE(h & 0x03ff, 0);
  // A NaN whose payload lives only in the low bits must not turn into inf.
  EXPECT_TRUE(std::isnan(fp16_to_fp32(detail::fp32_to_fp16_portable(std::bit_cast<float>(0x7f800001u)))));
}

TEST(Float16, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = detail::fp16_to_fp32_portable(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(detail::fp32_to_fp16_portable(f), h) << "half 0x" << std::hex << h;
    ASSERT_EQ(fp32_to_fp16(f), h);
    ASSERT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(static_cast<uint16_t>(h))), std::bit_cast<uint32_t>(f));
  }
}

TEST(Float16, PortableEncoderPicksTheNearestHalfForSampledFloats) {
  // Every 997th float in the finite half range (and around it): the result is at least as
  // close as both neighbours, and agrees with the hardware encoder when there is one.
  for (uint64_t bits = 0; bits < 0x477ff000u; bits += 997) {  // up to the overflow tie 65520
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    const uint16_t h = detail::fp32_to_fp16_portable(f);
    ASSERT_EQ(h, fp32_to_fp16(f)) << f;
    const double err = std::fabs(double(f) - detail::fp16_to_fp32_portable(h));
    const double up = std::fabs(double(f) - detail::fp16_to_fp32_portable(h + 1));
    const double down = h > 0 ? std::fabs(double(f) - detail::fp16_to_fp32_portable(h - 1)) : up;
    ASSERT_LE(err, up) << f;
    ASSERT_LE(err, down) << f;
  }
  EXPECT_EQ(detail::fp32_to_fp16_portable(65520.0f), 0x7c00);
}

// ---------------------------------------------------------------------------------------------
// bf16

TEST(BFloat16, TruncatesExactValuesAndRoundsTiesToEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00000001u)), 0x0000);  // subnormal underflow
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie
}

TEST(BFloat16, KeepsInfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(fp32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0xffffffffu)))));
  EXPECT_EQ(bf16_to_fp32(0x7f80), inf);
}

TEST(RowConversions, MatchTheScalarConversions) {
  const std::vector<float> x = {0.0f, 1.0f, -3.5f, 1e-6f, 65504.0f, 70000.0f, 0.1f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  convert_row_f32_to_f16(x.data(), h.data(), static_cast<int64_t>(x.size()));
  convert_row_f16_to_f32(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], fp32_to_fp16(x[i]));
    EXPECT_EQ(back[i], fp16_to_fp32(h[i]));
  }
  convert_row_f32_to_bf16(x.data(), h.data(), static_cast<int64_t>(x.size()));
  convert_row_bf16_to_f32(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], fp32_to_bf16(x[i]));
    EXPECT_EQ(back[i], bf16_to_fp32(h[i]));
  }
}

// ---------------------------------------------------------------------------------------------
// Block codecs

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(QuantQ8_0, BlockLayoutIsScaleThenThirtyTwoSignedBytes) {
  uint8_t bytes[sizeof(BlockQ8_0)];
  bytes[0] = 0x00;  // f16 0.5 = 0x3800, little-endian
  bytes[1] = 0x38;
  for (int i = 0; i < 32; ++i) bytes[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  BlockQ8_0 block;
  std::memcpy(&block, bytes, sizeof(block));
  float out[32];
  dequantize_row_q8_0(&block, out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * (i - 16)) << i;
}

TEST(QuantQ4_0, LowNibblesHoldTheFirstHalfAndHighNibblesTheSecond) {
  uint8_t bytes[sizeof(BlockQ4_0)];
  bytes[0] = 0x00;  // f16 2.0 = 0x4000
  bytes[1] = 0x40;
  for (int j = 0; j < 16; ++j) bytes[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  BlockQ4_0 block;
  std::memcpy(&block, bytes, sizeof(block));
  float out[32];
  dequantize_row_q4_0(&block, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(out[j + 16], 2.0f * (15 - j - 8)) << j;
  }
}

TEST(QuantQ8_0, RoundTripErrorIsAtMostHalfAStepPerBlock) {
  const int64_t n = 32 * 64;
  const auto x = random_floats(n, 1, 3.0f);
  std::vector<BlockQ8_0> q(n / kQK);
  std::vector<float> y(n);
  quantize_row_q8_0_ref(x.data(), q.data(), n);
  dequantize_row_q8_0(q.data(), y.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[b * kQK + i]));
    const float d = fp16_to_fp32(q[b].d);
    EXPECT_NEAR(d, amax / 127.0f, amax / 127.0f * 1e-3f);  // f16 scale
    // Half a step, plus what the f16 rounding of d moves the largest value.
    const float bound = d / 2 + 127.0f * std::fabs(d - amax / 127.0f) + 1e-6f;
    for (int i = 0; i < kQK; ++i) ASSERT_LE(std::fabs(x[b * kQK + i] - y[b * kQK + i]), bound);
  }
}

TEST(QuantQ8_0, AllZeroBlockHasZeroScaleAndZeroQuants) {
  std::vector<float> x(32, 0.0f);
  BlockQ8_0 q;
  quantize_row_q8_0_ref(x.data(), &q, 32);
  EXPECT_EQ(q.d, 0);
  for (int8_t v : q.qs) EXPECT_EQ(v, 0);
}

TEST(QuantQ4_0, RoundTripErrorIsAtMostOneStepPerBlock) {
  const int64_t n = 32 * 64;
  const auto x = random_floats(n, 2, 3.0f);
  std::vector<BlockQ4_0> q(n / kQK);
  std::vector<float> y(n);
  quantize_row_q4_0_ref(x.data(), q.data(), n);
  dequantize_row_q4_0(q.data(), y.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = std::fabs(fp16_to_fp32(q[b].d));
    for (int i = 0; i < kQK; ++i)
      ASSERT_LE(std::fabs(x[b * kQK + i] - y[b * kQK + i]), d * 1.01f + 1e-6f) << b << " " << i;
  }
}

TEST(QuantQ4_0, LargestMagnitudeMapsToNibbleZero) {
  std::vector<float> x(32, 0.2f);
  x[5] = -4.0f;  // extreme, negative: d = -4 / -8 = 0.5
  x[20] = 0.3f;
  BlockQ4_0 q;
  quantize_row_q4_0_ref(x.data(), &q, 32);
  EXPECT_EQ(fp16_to_fp32(q.d), 0.5f);
  EXPECT_EQ(q.qs[5] & 0x0f, 0);  // -4 / 0.5 + 8 = 0
  EXPECT_EQ(q.qs[0] & 0x0f, 8);  // 0.2 / 0.5 + 8 = 8.4 -> 8
  EXPECT_EQ(q.qs[4] >> 4, 9);    // value 20: 0.3 / 0.5 + 8 = 8.6 -> 9
}

// ---------------------------------------------------------------------------------------------
// Kernel tables

const cpu::KernelTable* table_named(const std::string& name) {
  if (name == "portable") return &cpu::portable_kernels();
  if (name == "avx2") return cpu::avx2_kernels();
  return cpu::avx512_kernels();
}

enum class WeightType { kF32, kF16, kQ8_0, kQ4_0 };

const char* weight_name(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "f32";
    case WeightType::kF16: return "f16";
    case WeightType::kQ8_0: return "q8_0";
    default: return "q4_0";
  }
}

// One gemm problem with deliberately loose strides. Padding bytes hold NaN patterns (0xff), so
// a kernel that reads past a row poisons its result; C padding must stay untouched.
struct GemmProblem {
  int64_t K, M, N;
  WeightType type;
  size_t lda, ldb, ldc;
  std::vector<uint8_t> A, B;
  std::vector<double> a_values, b_values;  // exact values the kernel sees, row-major
  std::vector<float> C;

  GemmProblem(const cpu::KernelTable& t, WeightType wt, int64_t k, int64_t m, int64_t n, uint32_t seed)
      : K(k), M(m), N(n), type(wt) {
    const auto wf = random_floats(static_cast<size_t>(M * K), seed);
    const auto xf = random_floats(static_cast<size_t>(N * K), seed + 1000);
    a_values.resize(M * K);
    b_values.resize(N * K);
    std::vector<float> tmp(K);
    const bool quantized = wt == WeightType::kQ8_0 || wt == WeightType::kQ4_0;
    const size_t a_row = wt == WeightType::kF32    ? K * 4
                         : wt == WeightType::kF16  ? K * 2
                         : wt == WeightType::kQ8_0 ? K / kQK * sizeof(BlockQ8_0)
                                                   : K / kQK * sizeof(BlockQ4_0);
    const size_t b_row = quantized ? K / kQK * sizeof(BlockQ8_0) : K * 4;
    lda = a_row + 36;  // keeps 2-byte alignment for f16/blocks, breaks 4-byte for nothing else
    ldb = b_row + (quantized ? 34 : 20);
    ldc = M + 3;
    if (wt == WeightType::kF32 || wt == WeightType::kF16) lda = a_row + 4 * ((wt == WeightType::kF32) ? 5 : 3);
    A.assign(lda * M, 0xff);
    B.assign(ldb * N, 0xff);
    for (int64_t i = 0; i < M; ++i) {
      uint8_t* row = A.data() + i * lda;
      const float* w = wf.data() + i * K;
      switch (wt) {
        case WeightType::kF32:
          std::memcpy(row, w, K * 4);
          for (int64_t j = 0; j < K; ++j) tmp[j] = w[j];
          break;
        case WeightType::kF16: {
          std::vector<uint16_t> h(K);
          convert_row_f32_to_f16(w, h.data(), K);
          std::memcpy(row, h.data(), K * 2);
          convert_row_f16_to_f32(h.data(), tmp.data(), K);
          break;
        }
        case WeightType::kQ8_0: {
          std::vector<BlockQ8_0> q(K / kQK);
          quantize_row_q8_0_ref(w, q.data(), K);
          std::memcpy(row, q.data(), a_row);
          dequantize_row_q8_0(q.data(), tmp.data(), K);
          break;
        }
        case WeightType::kQ4_0: {
          std::vector<BlockQ4_0> q(K / kQK);
          quantize_row_q4_0_ref(w, q.data(), K);
          std::memcpy(row, q.data(), a_row);
          dequantize_row_q4_0(q.data(), tmp.data(), K);
          break;
        }
      }
      for (int64_t j = 0; j < K; ++j) a_values[i * K + j] = tmp[j];
    }
    for (int64_t i = 0; i < N; ++i) {
      uint8_t* row = B.data() + i * ldb;
      const float* x = xf.data() + i * K;
      if (quantized) {
        std::vector<BlockQ8_0> q(K / kQK);
        t.quantize_row_q8_0(x, q.data(), K);  // the table's own activation quantizer
        std::memcpy(row, q.data(), b_row);
        dequantize_row_q8_0(q.data(), tmp.data(), K);
      } else {
        std::memcpy(row, x, K * 4);
        std::copy(x, x + K, tmp.begin());
      }
      for (int64_t j = 0; j < K; ++j) b_values[i * K + j] = tmp[j];
    }
    C.assign(ldc * N, -12345.0f);
  }

  void run(const cpu::KernelTable& t) {
    const cpu::GemmFn fn = type == WeightType::kF32    ? t.gemm_f32
                           : type == WeightType::kF16  ? t.gemm_f16
                           : type == WeightType::kQ8_0 ? t.gemm_q8_0
                                                       : t.gemm_q4_0;
    fn(K, M, N, A.data(), lda, B.data(), ldb, C.data(), ldc);
  }

  // Checks C against sum a*b in double; tolerance relative to sum |a||b|.
  void expect_matches_reference(double rel_tol) const {
    for (int64_t j = 0; j < N; ++j) {
      for (int64_t i = 0; i < M; ++i) {
        double sum = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          sum += a_values[i * K + k] * b_values[j * K + k];
          mag += std::fabs(a_values[i * K + k] * b_values[j * K + k]);
        }
        const float got = C[j * ldc + i];
        ASSERT_NEAR(got, sum, rel_tol * mag + 1e-30) << "i=" << i << " j=" << j;
      }
      for (size_t i = M; i < ldc; ++i) ASSERT_EQ(C[j * ldc + i], -12345.0f) << "C padding written";
    }
  }
};

class KernelTableTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = table_named(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << GetParam() << " kernels are not available on this CPU";
  }
  const cpu::KernelTable* table_ = nullptr;
};

TEST_P(KernelTableTest, ReportsItsName) { EXPECT_EQ(std::string(table_->name), GetParam()); }

TEST_P(KernelTableTest, QuantizeQ8_0MatchesTheReferenceUpToRoundingTies) {
  const int64_t n = 32 * 100;
  auto x = random_floats(n, 7, 2.0f);
  x[40] = 0.0f;
  for (int i = 64; i < 96; ++i) x[i] = 0.0f;  // an all-zero block
  std::vector<BlockQ8_0> got(n / kQK), want(n / kQK);
  table_->quantize_row_q8_0(x.data(), got.data(), n);
  quantize_row_q8_0_ref(x.data(), want.data(), n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    ASSERT_EQ(got[b].d, want[b].d) << b;
    for (int i = 0; i < kQK; ++i) ASSERT_LE(std::abs(got[b].qs[i] - want[b].qs[i]), 1) << b;
  }
}

struct Shape {
  int64_t K, M, N;
};

std::vector<Shape> test_shapes(bool quantized) {
  std::vector<Shape> shapes;
  const int64_t sizes[] = {1, 3, 7, 17, 64, 65};
  std::vector<int64_t> ks = {32, 64, 96};
  if (!quantized) ks.insert(ks.end(), {1, 17, 100});  // f32/f16 take any K
  for (int64_t k : ks)
    for (int64_t m : sizes)
      for (int64_t n : sizes) shapes.push_back({k, m, n});
  for (int64_t m : {1, 7, 65})
    for (int64_t n : {1, 3, 17, 64}) shapes.push_back({4096, m, n});
  shapes.push_back({288, 130, 70});  // several panels / row blocks / K slices, partial groups
  return shapes;
}

void check_all_shapes(const cpu::KernelTable& t, WeightType wt) {
  const bool quantized = wt == WeightType::kQ8_0 || wt == WeightType::kQ4_0;
  uint32_t seed = 100;
  for (const Shape& s : test_shapes(quantized)) {
    SCOPED_TRACE(std::string(weight_name(wt)) + " K=" + std::to_string(s.K) + " M=" + std::to_string(s.M) +
                 " N=" + std::to_string(s.N));
    GemmProblem p(t, wt, s.K, s.M, s.N, seed++);
    p.run(t);
    p.expect_matches_reference(1e-5);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(KernelTableTest, GemmF32MatchesDoublePrecisionReference) { check_all_shapes(*table_, WeightType::kF32); }
TEST_P(KernelTableTest, GemmF16MatchesDoublePrecisionReference) { check_all_shapes(*table_, WeightType::kF16); }
TEST_P(KernelTableTest, GemmQ8_0MatchesDoublePrecisionReferenceOnDequantizedValues) {
  check_all_shapes(*table_, WeightType::kQ8_0);
}
TEST_P(KernelTableTest, GemmQ4_0MatchesDoublePrecisionReferenceOnDequantizedValues) {
  check_all_shapes(*table_, WeightType::kQ4_0);
}

TEST_P(KernelTableTest, AgreesWithThePortableTableOnTheSameInputs) {
  const cpu::KernelTable& portable = cpu::portable_kernels();
  for (WeightType wt : {WeightType::kF32, WeightType::kF16, WeightType::kQ8_0, WeightType::kQ4_0}) {
    SCOPED_TRACE(weight_name(wt));
    // Activations quantized by the portable table so both see identical bytes.
    GemmProblem mine(portable, wt, 256, 33, 19, 5);
    GemmProblem ref = mine;
    mine.run(*table_);
    ref.run(portable);
    for (int64_t j = 0; j < mine.N; ++j)
      for (int64_t i = 0; i < mine.M; ++i) {
        double mag = 0.0;
        for (int64_t k = 0; k < mine.K; ++k)
          mag += std::fabs(mine.a_values[i * mine.K + k] * mine.b_values[j * mine.K + k]);
        ASSERT_NEAR(mine.C[j * mine.ldc + i], ref.C[j * ref.ldc + i], 2e-5 * mag);
      }
  }
}

TEST_P(KernelTableTest, LargeValuesDoNotOverflowIntegerDotProducts) {
  // Extreme quants everywhere: q8_0 weights of +-127 and activations of +-127.
  for (WeightType wt : {WeightType::kQ8_0, WeightType::kQ4_0}) {
    SCOPED_TRACE(weight_name(wt));
    GemmProblem p(*table_, wt, 4096, 5, 2, 9);
    std::vector<float> ones(4096);
    for (size_t k = 0; k < ones.size(); ++k) ones[k] = (k % 3 == 0) ? -1.0f : 1.0f;
    std::vector<BlockQ8_0> q(4096 / kQK);
    for (int64_t j = 0; j < p.N; ++j) {
      table_->quantize_row_q8_0(ones.data(), q.data(), 4096);
      std::memcpy(p.B.data() + j * p.ldb, q.data(), q.size() * sizeof(BlockQ8_0));
      std::vector<float> deq(4096);
      dequantize_row_q8_0(q.data(), deq.data(), 4096);
      for (int64_t k = 0; k < 4096; ++k) p.b_values[j * 4096 + k] = deq[k];
    }
    if (wt == WeightType::kQ8_0) {
      for (int64_t i = 0; i < p.M; ++i) {
        quantize_row_q8_0_ref(ones.data(), q.data(), 4096);
        std::memcpy(p.A.data() + i * p.lda, q.data(), q.size() * sizeof(BlockQ8_0));
        std::vector<float> deq(4096);
        dequantize_row_q8_0(q.data(), deq.data(), 4096);
        for (int64_t k = 0; k < 4096; ++k) p.a_values[i * 4096 + k] = deq[k];
      }
    }
    p.run(*table_);
    p.expect_matches_reference(1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTables, KernelTableTest, ::testing::Values("portable", "avx2", "avx512"),
                         [](const auto& info) { return info.param; });

TEST(KernelDispatch, BestTableIsTheWidestAvailable) {
  const cpu::KernelTable& best = cpu::best_kernels();
  if (std::getenv("TENSORPC_KERNELS") != nullptr) GTEST_SKIP() << "selection overridden";
  if (cpu::avx512_kernels() != nullptr)
    EXPECT_STREQ(best.name, "avx512");
  else if (cpu::avx2_kernels() != nullptr)
    EXPECT_STREQ(best.name, "avx2");
  else
    EXPECT_STREQ(best.name, "portable");
}

}  // namespace
}  // namespace tensorpc
