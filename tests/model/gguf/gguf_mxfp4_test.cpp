// An mxfp4 tensor written by another GGUF writer (tests/data/mxfp4-gguf-py.gguf, see the README
// there: llama.cpp gguf-py's MXFP4 quantizer) loads through tensorpc's reader, decodes to the
// floats it was made from within the format's error, and has the bytes tensorpc's own quantizer
// writes for those floats.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "test_util.h"

namespace tensorpc {
namespace {

TEST(GgufMxfp4, AFileFromTheReferenceWriterLoadsAndMatchesTensorpcsQuantizer) {
  auto file = GgufFile::open(std::string(TENSORPC_SOURCE_DIR) + "/tests/data/mxfp4-gguf-py.gguf");
  ASSERT_TRUE(file.ok()) << file.status().message();
  const GgufTensorInfo* src = (*file)->tensor("source");
  const GgufTensorInfo* w = (*file)->tensor("weights");
  ASSERT_NE(src, nullptr);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(src->type, DType::f32);
  ASSERT_EQ(w->type, DType::mxfp4);
  ASSERT_EQ(w->ne, src->ne);
  const int64_t n = w->nelements();
  ASSERT_EQ(w->nbytes, static_cast<uint64_t>(n / 32 * 17));

  const std::vector<float> x = test::decode(DType::f32, src->bytes.data(), n);
  const std::vector<float> y = test::decode(DType::mxfp4, w->bytes.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    // The block's scale 2^(e - 127): errors stay within 2 of it (clipping above 6, see quant_mxfp4.cpp).
    const double s = std::ldexp(1.0, w->bytes[i / 32 * 17] - 127);
    ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), 2 * s) << "value " << i;
  }

  std::vector<uint8_t> ours(w->nbytes);
  traits(DType::mxfp4).from_float(x.data(), ours.data(), n);
  EXPECT_EQ(ours, std::vector<uint8_t>(w->bytes.begin(), w->bytes.end()));
}

}  // namespace
}  // namespace tensorpc
