// GGUF reader on hostile files: each must be refused with a Status that
// names what is wrong (the key, the tensor, the type id, the count), never
// a crash, an over-read (ASan runs these) or an allocation sized by a lie.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/gguf/gguf.h"
#include "model/gguf/gguf_bytes.h"
#include "model/gguf/gguf_writer.h"

namespace tensorpc {
namespace {

using test::GgufBytes;

// Opens a private copy of exactly these bytes (so ASan catches any read past
// them) and returns the failure; a file that opens is a test failure.
Status open_fails(const std::vector<uint8_t>& bytes) {
  std::vector<uint8_t> copy(bytes);
  auto f = GgufFile::open_memory(copy);
  EXPECT_FALSE(f.ok()) << "a hostile file was accepted";
  return f.ok() ? Status() : f.status();
}

void expect_mentions(const Status& s, const std::string& what) {
  EXPECT_NE(s.message().find(what), std::string::npos) << "'" << what << "' not in: " << s.to_string();
}

// A valid file that uses most of the format: several value types, arrays,
// strings, two tensors. The writer ends the file with the last tensor's
// bytes, so every proper prefix of it is truncated somewhere that matters.
std::vector<uint8_t> small_valid_file() {
  GgufWriter w(64);
  EXPECT_TRUE(w.add_string("general.architecture", "llama").ok());
  EXPECT_TRUE(w.add_u32("llama.block_count", 2).ok());
  EXPECT_TRUE(w.add_bool("flag", true).ok());
  EXPECT_TRUE(w.add_string_array("tokens", {"a", "bc"}).ok());
  EXPECT_TRUE(w.add_f32_array("scores", {1.f, 2.f}).ok());
  EXPECT_TRUE(
      w.add("nested", GgufValue::array(GgufType::array, {GgufValue::array(GgufType::i8, {GgufValue::of(int8_t{1})})}))
          .ok());
  const std::vector<uint8_t> a(34, 1), b(8, 2);
  const int64_t ne_a[] = {32}, ne_b[] = {2};
  EXPECT_TRUE(w.add_tensor("a", DType::q8_0, ne_a, a).ok());
  EXPECT_TRUE(w.add_tensor("b", DType::f32, ne_b, b).ok());
  return w.encode().value();
}

TEST(GgufHostile, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> file = small_valid_file();
  ASSERT_TRUE(GgufFile::open_memory(file).ok());
  for (size_t n = 0; n < file.size(); ++n) {
    const Status s = open_fails(std::vector<uint8_t>(file.begin(), file.begin() + n));
    EXPECT_FALSE(s.message().empty()) << "prefix of " << n << " bytes";
  }
}

TEST(GgufHostile, WrongMagicIsNotGguf) {
  std::vector<uint8_t> file = small_valid_file();
  file[3] = 'X';
  expect_mentions(open_fails(file), "not a GGUF file");
}

TEST(GgufHostile, VersionsOtherThanTwoAndThreeAreUnsupported) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    const Status s = open_fails(GgufBytes().header(0, 0, v).bytes);
    EXPECT_EQ(s.code(), StatusCode::unsupported) << v;
    expect_mentions(s, v == 0x03000000u ? "big-endian" : "version " + std::to_string(v));
  }
}

TEST(GgufHostile, LyingHeaderCountsFailBeforeAllocating) {
  expect_mentions(open_fails(GgufBytes().header(0, 1ull << 60).bytes), "metadata count");
  expect_mentions(open_fails(GgufBytes().header(1ull << 60, 0).bytes), "tensor count");
}

TEST(GgufHostile, StringLengthThatLiesIsRefused) {
  // The key's own length.
  GgufBytes key;
  key.header(0, 1).u64(1000).raw("abc", 3).zeros(32);
  expect_mentions(open_fails(key.bytes), "string length 1000");
  // A string value's length, naming its key.
  GgufBytes value;
  value.header(0, 1).str("general.name").u32(8).u64(~0ull).raw("x", 1);
  const Status s = open_fails(value.bytes);
  expect_mentions(s, "'general.name'");
  expect_mentions(s, "string length 18446744073709551615");
}

TEST(GgufHostile, ArrayCountOfTwoToTheSixtyIsRefused) {
  GgufBytes b;
  b.header(0, 1).str("tokens").u32(9).u32(8).u64(1ull << 60).str("a");
  const Status s = open_fails(b.bytes);
  expect_mentions(s, "'tokens'");
  expect_mentions(s, "array of 1152921504606846976 string");
  GgufBytes u8s;
  u8s.header(0, 1).str("bytes").u32(9).u32(0).u64(1ull << 60).zeros(4);
  expect_mentions(open_fails(u8s.bytes), "cannot fit");
}

TEST(GgufHostile, BadValueTypesAndBoolsAreRefused) {
  expect_mentions(open_fails(GgufBytes().header(0, 1).str("k").u32(13).u64(0).bytes), "value type id 13");
  expect_mentions(open_fails(GgufBytes().header(0, 1).str("k").u32(9).u32(77).u64(0).bytes), "element type id 77");
  expect_mentions(open_fails(GgufBytes().header(0, 1).str("k").u32(7).u8(2).bytes), "bool value 2");
  expect_mentions(open_fails(GgufBytes().header(0, 1).str("").u32(4).u32(0).bytes), "is empty");
}

TEST(GgufHostile, DeeplyNestedArraysAreRefused) {
  GgufBytes b;
  b.header(0, 1).str("deep").u32(9);
  for (int i = 0; i < 100; ++i) b.u32(9).u64(1);
  b.u32(0).u64(0);
  expect_mentions(open_fails(b.bytes), "nested deeper");
}

TEST(GgufHostile, DuplicateKeysAndTensorNamesAreRefused) {
  expect_mentions(open_fails(GgufBytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes),
                  "duplicate metadata key 'k'");
  GgufBytes b;
  b.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad_to(32).zeros(64);
  expect_mentions(open_fails(b.bytes), "duplicate tensor name 'w'");
}

// Found by the fuzzer: the reader took a nameless tensor that the writer refuses.
TEST(GgufHostile, ATensorWithAnEmptyNameIsRefused) {
  GgufBytes b;
  b.header(1, 0).tensor("", {8}, 0, 0).pad_to(32).zeros(32);
  expect_mentions(open_fails(b.bytes), "empty name");
}

// A file of one tensor info and `data` bytes of data section.
std::vector<uint8_t> one_tensor(std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
  GgufBytes b;
  b.header(1, 0).tensor("blk.0.attn_q.weight", ne, type, offset).pad_to(32).zeros(data);
  return b.bytes;
}

TEST(GgufHostile, TensorShapesAndTypesAreChecked) {
  ASSERT_TRUE(GgufFile::open_memory(one_tensor({32, 2}, 8, 0, 68)).ok());  // the baseline is valid

  Status five = open_fails(one_tensor({1, 1, 1, 1, 1}, 0, 0, 4));
  expect_mentions(five, "'blk.0.attn_q.weight'");
  expect_mentions(five, "5 dims");
  expect_mentions(open_fails(one_tensor({}, 0, 0, 4)), "0 dims");

  ASSERT_TRUE(GgufFile::open_memory(one_tensor({256}, 12, 0, 144)).ok());  // q4_K
  Status iq2 = open_fails(one_tensor({256}, 16, 0, 66));
  EXPECT_EQ(iq2.code(), StatusCode::unsupported);
  expect_mentions(iq2, "'blk.0.attn_q.weight' (iq2_xxs)");

  expect_mentions(open_fails(one_tensor({1ull << 32, 1ull << 32}, 0, 0, 4)), "element count overflows");
  expect_mentions(open_fails(one_tensor({1ull << 63, 1}, 0, 0, 4)), "too large");
  expect_mentions(open_fails(one_tensor({1ull << 62, 1}, 0, 0, 4)), "byte size overflows");

  Status q8 = open_fails(one_tensor({48, 2}, 8, 0, 200));
  expect_mentions(q8, "ne[0] = 48 is not a multiple of 32");
  expect_mentions(q8, "q8_0");
}

TEST(GgufHostile, EveryTensorOfATypeTensorpcDoesNotRunIsNamedInOneError) {
  GgufBytes b;
  b.header(4, 0)
      .tensor("token_embd.weight", {256, 2}, 16, 0)  // iq2_xxs
      .tensor("output_norm.weight", {8}, 0, 192)
      .tensor("blk.0.ffn_up.weight", {256}, 99, 224)    // an id GGUF does not define here
      .tensor("blk.0.ffn_down.weight", {256}, 15, 480)  // q8_K: activations only
      .pad_to(32)
      .zeros(1024);
  const Status s = open_fails(b.bytes);
  EXPECT_EQ(s.code(), StatusCode::unsupported);
  expect_mentions(s, "3 tensors have types tensorpc does not run");
  expect_mentions(s, "'token_embd.weight' (iq2_xxs)");
  expect_mentions(s, "'blk.0.ffn_up.weight' (type id 99 (unknown))");
  expect_mentions(s, "'blk.0.ffn_down.weight' (q8_K)");
  expect_mentions(s, "q6_K");  // the list of what it runs
  EXPECT_EQ(s.message().find("output_norm"), std::string::npos) << s.message();
}

TEST(GgufHostile, TensorDataMustLieAlignedInsideTheFileWithoutOverlap) {
  Status past = open_fails(one_tensor({32, 2}, 8, 0, 67));  // one byte short
  expect_mentions(past, "'blk.0.attn_q.weight'");
  expect_mentions(past, "past the end of the file");
  expect_mentions(open_fails(one_tensor({4}, 0, ~0ull - 31, 16)), "past the end");
  expect_mentions(open_fails(one_tensor({4}, 0, 16, 64)), "not a multiple of the alignment 32");

  GgufBytes overlap;
  overlap.header(2, 0).tensor("x", {16}, 0, 0).tensor("y", {16}, 0, 32).pad_to(32).zeros(96);
  expect_mentions(open_fails(overlap.bytes), "'y' at data offset 32 overlaps tensor 'x'");

  GgufBytes cut;  // the file ends inside the padding before the data section
  cut.header(1, 0).tensor("z", {0}, 0, 0);
  expect_mentions(open_fails(cut.bytes), "before the data section");
}

TEST(GgufHostile, AlignmentMustBeAUint32PowerOfTwo) {
  expect_mentions(open_fails(GgufBytes().header(0, 1).kv_u32("general.alignment", 48).bytes), "not a power of two");
  expect_mentions(open_fails(GgufBytes().header(0, 1).kv_u32("general.alignment", 0).bytes), "not a power of two");
  GgufBytes wrong;
  wrong.header(0, 1).str("general.alignment").u32(10).u64(64);
  expect_mentions(open_fails(wrong.bytes), "is uint64, not uint32");
}

TEST(GgufHostile, EmptyInputIsTruncated) { expect_mentions(open_fails({}), "truncated"); }

TEST(GgufHostile, WriterRefusesWhatTheReaderWould) {
  GgufWriter w;
  const std::vector<uint8_t> bytes(4);
  const int64_t ne5[] = {1, 1, 1, 1, 1}, ne48[] = {48}, ne1[] = {1};
  EXPECT_FALSE(w.add_tensor("t", DType::f32, ne5, bytes).ok());
  EXPECT_FALSE(w.add_tensor("t", DType::q8_0, ne48, bytes).ok());
  EXPECT_FALSE(w.add_tensor("t", DType::f32, ne1, std::vector<uint8_t>(3)).ok());  // wrong byte count
  ASSERT_TRUE(w.add_tensor("t", DType::f32, ne1, bytes).ok());
  EXPECT_FALSE(w.add_tensor("t", DType::f32, ne1, bytes).ok());
  ASSERT_TRUE(w.add_u32("k", 1).ok());
  EXPECT_FALSE(w.add_u32("k", 2).ok());
  EXPECT_FALSE(w.add_u32("general.alignment", 64).ok());
  EXPECT_FALSE(w.add("mixed", GgufValue::array(GgufType::u8, {GgufValue::of(1.0f)})).ok());
  EXPECT_FALSE(GgufWriter(48).encode().ok());
  EXPECT_FALSE(GgufWriter(0).add_tensor("t", DType::f32, ne1, bytes).ok());
}

}  // namespace
}  // namespace tensorpc
