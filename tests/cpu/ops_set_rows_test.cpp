// set_rows: rows scattered into a destination at indices given as data.
#include <gtest/gtest.h>

#include <vector>

#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"

namespace tensorpc {
namespace {

TEST(SetRows, WritesEachRowAtItsIndexConvertingTypeAndSkipsIndicesOutOfRange) {
  for (int threads : {1, 2}) {
    CpuDevice dev({.threads = threads});
    Context ctx;
    Tensor* cache = ctx.new_tensor(DType::f16, {32, 5}, "cache");
    auto cache_buffer = dev.allocate(cache->nbytes()).value();
    ASSERT_TRUE(cache_buffer->place(*cache, 0).ok());
    ASSERT_TRUE(cache_buffer->clear(0).ok());

    Tensor* src = ctx.new_tensor(DType::f32, {32, 3}, "src");
    Tensor* rows = ctx.new_tensor(DType::i32, {3}, "rows");
    src->flags |= kFlagInput;
    rows->flags |= kFlagInput;
    Tensor* written = ctx.set_rows(cache, src, rows);
    EXPECT_EQ(written->view_src, cache);
    Graph g = Graph::build({written});
    GraphAllocator alloc(dev);
    ASSERT_TRUE(alloc.allocate(g).ok());
    std::vector<float> values(96);
    for (int i = 0; i < 96; ++i) values[i] = 0.25f * static_cast<float>(i + 1);
    ASSERT_TRUE(write_from_f32(*src, values).ok());
    ASSERT_TRUE(write_from_f32(*rows, {4, 0, 9}).ok());  // 9 is outside the 5 rows: skipped
    ASSERT_TRUE(dev.create_stream().value()->compute(g).ok());

    const std::vector<float> out = read_as_f32(*cache).value();
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t i = 0; i < 32; ++i) {
        float want = 0.0f;
        if (r == 4) want = values[i];
        if (r == 0) want = values[32 + i];
        EXPECT_EQ(out[r * 32 + i], want) << "row " << r << " element " << i << " threads " << threads;
      }
    }
  }
}

// A transposed cache ([positions, channels] in memory, written through a
// transpose view) takes each src row as a column.
TEST(SetRows, IntoATransposedViewWritesEachRowAsAColumn) {
  for (DType type : {DType::f32, DType::f16}) {
    for (int threads : {1, 2}) {
      CpuDevice dev({.threads = threads});
      Context ctx;
      Tensor* cache = ctx.new_tensor(type, {6, 8}, "cache");  // 6 positions, 8 channels
      auto cache_buffer = dev.allocate(cache->nbytes()).value();
      ASSERT_TRUE(cache_buffer->place(*cache, 0).ok());
      ASSERT_TRUE(cache_buffer->clear(0).ok());
      Tensor* src = ctx.new_tensor(DType::f32, {8, 3}, "src");  // 3 tokens of 8 channels
      Tensor* rows = ctx.new_tensor(DType::i32, {3}, "rows");
      src->flags |= kFlagInput;
      rows->flags |= kFlagInput;
      Tensor* written = ctx.set_rows(ctx.transpose(cache), src, rows);
      Graph g = Graph::build({written});
      GraphAllocator alloc(dev);
      ASSERT_TRUE(alloc.allocate(g).ok());
      std::vector<float> values(24);
      for (int i = 0; i < 24; ++i) values[i] = 0.5f * static_cast<float>(i + 1);
      ASSERT_TRUE(write_from_f32(*src, values).ok());
      ASSERT_TRUE(write_from_f32(*rows, {5, 1, 6}).ok());  // 6 is outside the 6 positions: skipped
      ASSERT_TRUE(dev.create_stream().value()->compute(g).ok());

      const std::vector<float> out = read_as_f32(*cache).value();
      for (int64_t c = 0; c < 8; ++c) {
        for (int64_t p = 0; p < 6; ++p) {
          float want = 0.0f;
          if (p == 5) want = values[c];
          if (p == 1) want = values[8 + c];
          EXPECT_EQ(out[c * 6 + p], want)
              << "channel " << c << " position " << p << " threads " << threads << " type " << name_of(type);
        }
      }
    }
  }
}

TEST(SetRows, ShapeRulesNameTheOp) {
  Context ctx;
  Tensor* cache = ctx.new_tensor(DType::f32, {16, 8});
  Tensor* src = ctx.new_tensor(DType::f32, {8, 2});
  Tensor* rows = ctx.new_tensor(DType::i32, {2});
  try {
    ctx.set_rows(cache, src, rows);
    FAIL() << "rows of different lengths were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set_rows"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ctx.set_rows(cache, ctx.new_tensor(DType::f32, {16, 3}), rows), Error);
  EXPECT_THROW(ctx.set_rows(cache, ctx.new_tensor(DType::f32, {16, 2}), ctx.new_tensor(DType::f32, {2})), Error);
  // Quantized rows cannot be written one element at a time.
  Tensor* strided_q = ctx.new_tensor(DType::q8_0, {32, 8});
  strided_q->nb[0] *= 2;
  try {
    ctx.set_rows(strided_q, ctx.new_tensor(DType::f32, {32, 2}), rows);
    FAIL() << "a quantized dst with strided rows was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantized dst must be contiguous"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tensorpc
