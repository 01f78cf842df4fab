// The reference quantizers take any float a client may send: infinities,
// NaNs and subnormal blocks give valid blocks, never undefined behaviour
// (the sanitizer build checks the conversions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/float16.h"
#include "core/quant.h"

namespace tensorpc {
namespace {

std::vector<float> hostile_block(float special) {
  std::vector<float> x(kQK, 1.0f);
  x[3] = special;
  x[17] = -special;
  return x;
}

TEST(QuantReference, NonFiniteAndSubnormalBlocksQuantizeWithoutUndefinedBehaviour) {
  const float specials[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            1e-40f, std::numeric_limits<float>::denorm_min(), 3e38f};
  for (float special : specials) {
    std::vector<float> x = hostile_block(special);
    if (special < 1e-30f) x.assign(kQK, special);  // a whole subnormal block: 1/d overflows
    BlockQ8_0 q8;
    BlockQ4_0 q4;
    quantize_row_q8_0_ref(x.data(), &q8, kQK);
    quantize_row_q4_0_ref(x.data(), &q4, kQK);
    for (int8_t q : q8.qs) EXPECT_GE(q, -127) << special;
    std::vector<float> back(kQK);
    dequantize_row_q8_0(&q8, back.data(), kQK);
    dequantize_row_q4_0(&q4, back.data(), kQK);
  }
}

TEST(QuantReference, SubnormalBlockQuantizesToZeroOrTinyValues) {
  std::vector<float> x(kQK, 1e-40f);
  BlockQ8_0 q8;
  quantize_row_q8_0_ref(x.data(), &q8, kQK);
  std::vector<float> back(kQK);
  dequantize_row_q8_0(&q8, back.data(), kQK);
  for (float v : back) EXPECT_LE(std::fabs(v), 1e-30f);
}

TEST(QuantReference, Q8CodesAreTheValuesRoundedHalfAwayFromZero) {
  // Blocks whose extreme is 127, so that the codes are the values themselves, with halves,
  // values just either side of them, and both signs.
  for (const float base : {0.0f, 0.5f, 1.5f, 2.5f, 63.5f, 125.25f, 0.49999997f, 0.50000006f, 124.99999f}) {
    std::vector<float> x(kQK);
    for (int i = 0; i < kQK; ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (base + static_cast<float>(i % 8) * 0.25f);
    x[31] = 127.0f;
    BlockQ8_0 q8;
    quantize_row_q8_0_ref(x.data(), &q8, kQK);
    ASSERT_EQ(fp16_to_fp32(q8.d), 1.0f);
    for (int i = 0; i < kQK; ++i) EXPECT_EQ(q8.qs[i], static_cast<int8_t>(std::round(x[i]))) << x[i];
  }
}

}  // namespace
}  // namespace tensorpc
