// mxfp4 as the format defines it (test_util.h's straight decode: E2M1 code x 2^(e - 127)), and
// the quantizer's documented rounding (src/core/quant_mxfp4.cpp): the exponent from the block's
// largest finite magnitude, each value to its nearest code, ties to the smaller magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensorpc/dtype.h"
#include "test_util.h"

namespace tensorpc {
namespace {

using test::kMXFP4Bytes;
using test::mxfp4_value;

std::vector<uint8_t> quantize(const std::vector<float>& x) {
  std::vector<uint8_t> bytes(x.size() / 32 * kMXFP4Bytes);
  traits(DType::mxfp4).from_float(x.data(), bytes.data(), static_cast<int64_t>(x.size()));
  return bytes;
}

std::vector<float> to_float(const std::vector<uint8_t>& bytes) {
  std::vector<float> y(bytes.size() / kMXFP4Bytes * 32);
  traits(DType::mxfp4).to_float(bytes.data(), y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// floor(log2 m) of a positive finite m, exactly.
int floor_log2(double m) {
  int k = 0;
  std::frexp(m, &k);  // m = f * 2^k, f in [0.5, 1)
  return k - 1;
}

TEST(Mxfp4, TraitsNamesAndLayout) {
  EXPECT_EQ(static_cast<uint32_t>(DType::mxfp4), 39u);
  EXPECT_EQ(block_size(DType::mxfp4), 32);
  EXPECT_EQ(block_bytes(DType::mxfp4), 17u);
  EXPECT_TRUE(is_quantized(DType::mxfp4));
  EXPECT_EQ(storage_alignment(DType::mxfp4), 1u);  // no f16 field to align
  EXPECT_EQ(dtype_from_name("mxfp4"), DType::mxfp4);
  EXPECT_EQ(dtype_from_id(39), DType::mxfp4);
  EXPECT_EQ(gguf_type_name(39), "mxfp4");
  EXPECT_EQ(row_bytes(DType::mxfp4, 64), 34u);
}

TEST(Mxfp4, ToFloatDecodesEveryCodeAtEveryExponent) {
  // Block e: exponent byte e, codes 0..15 in the low nibbles and 15..0 in the high ones.
  std::vector<uint8_t> bytes(256 * kMXFP4Bytes);
  for (int e = 0; e < 256; ++e) {
    uint8_t* b = bytes.data() + e * kMXFP4Bytes;
    b[0] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  const std::vector<float> y = to_float(bytes);
  for (int e = 0; e < 256; ++e)
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(y[e * 32 + j], mxfp4_value(bytes.data() + e * kMXFP4Bytes, j)) << "e=" << e << " j=" << j;
  // A few by hand: e = 127 is scale 1, so codes are the E2M1 values themselves.
  EXPECT_EQ(y[127 * 32 + 7], 6.0f);
  EXPECT_EQ(y[127 * 32 + 3], 1.5f);
  EXPECT_EQ(y[127 * 32 + 16 + 2], -3.0f);  // high nibble of byte 2 is code 13: -1.5 x 2
  EXPECT_EQ(y[128 * 32 + 1], 1.0f);        // 0.5 x 2
}

TEST(Mxfp4, FromFloatPicksTheExponentAndTheNearestCode) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-6.0f, 6.0f);
  const int blocks = 400;
  std::vector<float> x(32 * blocks);
  for (int b = 0; b < blocks; ++b) {
    const float scale = std::pow(10.0f, decade(rng));
    for (int j = 0; j < 32; ++j) x[32 * b + j] = scale * normal(rng);
  }
  const std::vector<uint8_t> bytes = quantize(x);
  const std::vector<float> y = to_float(bytes);
  for (int b = 0; b < blocks; ++b) {
    double amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[32 * b + j])));
    const int e = floor_log2(amax) - 2 + 127;
    ASSERT_EQ(bytes[b * kMXFP4Bytes], e) << "block " << b;
    const double s = std::ldexp(1.0, e - 127);
    for (int j = 0; j < 32; ++j) {
      const double v = x[32 * b + j];
      double best = std::numeric_limits<double>::infinity();
      for (int c = 0; c < 16; ++c) best = std::min(best, std::fabs(test::e2m1_value(c) * s - v));
      ASSERT_EQ(std::fabs(y[32 * b + j] - v), best) << "block " << b << " value " << j;
      // The format's error: half the widest gap (4 to 6) below 6 s, clipping up to 8 s above.
      ASSERT_LE(best, std::fabs(v) <= 6 * s ? s : 2 * s);
    }
  }
}

TEST(Mxfp4, ExactlyRepresentableBlocksKeepTheirBytes) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> exponent(20, 230), code(0, 15), pos(0, 31), big(6, 7);
  const int blocks = 200;
  std::vector<uint8_t> bytes(blocks * kMXFP4Bytes);
  for (int b = 0; b < blocks; ++b) {
    uint8_t codes[32];
    for (uint8_t& c : codes) {
      c = static_cast<uint8_t>(code(rng));
      if (c == 8) c = 0;  // -0 quantizes to +0
    }
    // A largest magnitude of 4 or 6 (codes 6, 7) makes e the block's own exponent.
    codes[pos(rng)] = static_cast<uint8_t>(big(rng) | (rng() % 2 ? 8 : 0));
    uint8_t* p = bytes.data() + b * kMXFP4Bytes;
    p[0] = static_cast<uint8_t>(exponent(rng));
    for (int j = 0; j < 16; ++j) p[1 + j] = static_cast<uint8_t>(codes[j] | (codes[j + 16] << 4));
  }
  std::vector<float> x(32 * blocks);
  for (int b = 0; b < blocks; ++b)
    for (int j = 0; j < 32; ++j) x[32 * b + j] = mxfp4_value(bytes.data() + b * kMXFP4Bytes, j);
  EXPECT_EQ(quantize(x), bytes);
}

TEST(Mxfp4, TiesGoToTheSmallerMagnitude) {
  // amax 4 gives e = 127 (scale 1); 1.25 lies between 1 and 1.5, 5 between 4 and 6.
  std::vector<float> x(32, 0.0f);
  x[0] = 4.0f;
  x[1] = 1.25f;
  x[2] = -1.25f;
  x[3] = 5.0f;
  x[4] = 0.25f;  // between 0 and 0.5
  const std::vector<float> y = to_float(quantize(x));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 4.0f);
  EXPECT_EQ(y[4], 0.0f);
}

TEST(Mxfp4, ZeroBlocksAreZeroBytes) {
  std::vector<float> x(64, 0.0f);
  for (int j = 32; j < 64; j += 2) x[j] = -0.0f;
  EXPECT_EQ(quantize(x), std::vector<uint8_t>(2 * kMXFP4Bytes, 0));
}

TEST(Mxfp4, HugeAndTinyBlocksStayWithinTheFormatsError) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float magnitude : {3e38f, 1e30f, 1e-30f, 1e-37f, 1e-39f, 1e-44f}) {
    SCOPED_TRACE(magnitude);
    std::vector<float> x(32);
    for (float& v : x) v = magnitude * unit(rng);
    x[5] = magnitude;
    const std::vector<uint8_t> bytes = quantize(x);
    const std::vector<float> y = to_float(bytes);
    // Below 2^-125 the exponent would be negative: it stays 0, the smallest scale.
    const int e = std::max(0, floor_log2(magnitude) - 2 + 127);
    EXPECT_EQ(bytes[0], e);
    const double s = std::ldexp(1.0, e - 127);
    for (int j = 0; j < 32; ++j) {
      ASSERT_TRUE(std::isfinite(y[j])) << j;
      ASSERT_LE(std::fabs(static_cast<double>(y[j]) - x[j]), 2 * s) << j;
    }
  }
}

TEST(Mxfp4, NaNAndInfinityDoNotSetTheExponent) {
  std::vector<float> x(32, 0.5f);
  x[0] = std::numeric_limits<float>::quiet_NaN();
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = -std::numeric_limits<float>::infinity();
  x[3] = 2.0f;  // the largest finite magnitude: e = 1 - 2 + 127
  const std::vector<uint8_t> bytes = quantize(x);
  EXPECT_EQ(bytes[0], 126);
  const std::vector<float> y = to_float(bytes);
  EXPECT_EQ(y[0], 0.0f);  // NaN becomes code 0
  EXPECT_EQ(y[1], 3.0f);  // +-inf the largest code of their sign: 6 x 2^-1
  EXPECT_EQ(y[2], -3.0f);
  EXPECT_EQ(y[3], 2.0f);
  EXPECT_EQ(y[4], 0.5f);
}

}  // namespace
}  // namespace tensorpc
