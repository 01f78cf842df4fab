// GGUF reader and writer on valid files: every value type and every
// supported tensor type round-trips through GgufWriter and GgufFile, a file
// built byte by byte reads as the format says (and is exactly what the
// writer produces), and GGUF tensors upload into device buffers.
// Hostile files are in gguf_hostile_test.cpp.
#include "model/gguf/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "model/gguf/gguf_bytes.h"
#include "model/gguf/gguf_tensors.h"
#include "model/gguf/gguf_writer.h"
#include "tensorpc/context.h"
#include "tensorpc/cpu_device.h"

namespace tensorpc {
namespace {

using test::GgufBytes;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::unique_ptr<GgufFile> open_ok(std::vector<uint8_t> bytes) {
  auto f = GgufFile::open_owned(std::move(bytes));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

TEST(GgufRoundTrip, EveryValueTypeReadsBackAsWritten) {
  GgufWriter w;
  ASSERT_TRUE(w.add_u8("t.u8", 200).ok());
  ASSERT_TRUE(w.add_i8("t.i8", -100).ok());
  ASSERT_TRUE(w.add_u16("t.u16", 60000).ok());
  ASSERT_TRUE(w.add_i16("t.i16", -30000).ok());
  ASSERT_TRUE(w.add_u32("t.u32", 4000000000u).ok());
  ASSERT_TRUE(w.add_i32("t.i32", -2000000000).ok());
  ASSERT_TRUE(w.add_f32("t.f32", 1.5f).ok());
  ASSERT_TRUE(w.add_bool("t.bool", true).ok());
  ASSERT_TRUE(w.add_string("t.string", "llama").ok());
  ASSERT_TRUE(w.add_u64("t.u64", 1ull << 40).ok());
  ASSERT_TRUE(w.add_i64("t.i64", -(1ll << 40)).ok());
  ASSERT_TRUE(w.add_f64("t.f64", 0.1).ok());
  ASSERT_TRUE(w.add_string_array("t.tokens", {"<s>", "", "\xe2\x96\x81hello"}).ok());
  ASSERT_TRUE(w.add_f32_array("t.scores", {0.f, -1.25f, 3e9f}).ok());
  ASSERT_TRUE(w.add_i32_array("t.types", {1, -2, 3}).ok());
  ASSERT_TRUE(w.add("t.empty", GgufValue::array(GgufType::u16, {})).ok());
  ASSERT_TRUE(w.add("t.bools", GgufValue::array(GgufType::boolean, {GgufValue::of(false), GgufValue::of(true)})).ok());
  GgufValue inner = GgufValue::array(GgufType::string, {GgufValue::of("a"), GgufValue::of("bc")});
  ASSERT_TRUE(
      w.add("t.nested", GgufValue::array(GgufType::array, {inner, GgufValue::array(GgufType::string, {})})).ok());
  auto bytes = w.encode();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = open_ok(*bytes);
  ASSERT_TRUE(f);

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->get_u32("t.u8").value(), 200u);  // integers widen to any type they fit
  EXPECT_EQ(f->get_i32("t.i8").value(), -100);
  EXPECT_EQ(f->get_u32("t.u16").value(), 60000u);
  EXPECT_EQ(f->get_i32("t.i16").value(), -30000);
  EXPECT_EQ(f->get_u32("t.u32").value(), 4000000000u);
  EXPECT_EQ(f->get_i32("t.i32").value(), -2000000000);
  EXPECT_EQ(f->get_f32("t.f32").value(), 1.5f);
  EXPECT_EQ(f->get_bool("t.bool").value(), true);
  EXPECT_EQ(f->get_string("t.string").value(), "llama");
  EXPECT_EQ(f->get_u64("t.u64").value(), 1ull << 40);
  EXPECT_EQ(f->get_i64("t.i64").value(), -(1ll << 40));
  EXPECT_EQ(f->get_f64("t.f64").value(), 0.1);
  EXPECT_EQ(f->get_string_array("t.tokens").value(), (std::vector<std::string>{"<s>", "", "\xe2\x96\x81hello"}));
  EXPECT_EQ(f->get_f32_array("t.scores").value(), (std::vector<float>{0.f, -1.25f, 3e9f}));
  EXPECT_EQ(f->get_i32_array("t.types").value(), (std::vector<int32_t>{1, -2, 3}));

  // Every key, in file order, with its type; and the generic value of each.
  const std::vector<std::pair<std::string, GgufType>> expected = {
      {"t.u8", GgufType::u8},        {"t.i8", GgufType::i8},        {"t.u16", GgufType::u16},
      {"t.i16", GgufType::i16},      {"t.u32", GgufType::u32},      {"t.i32", GgufType::i32},
      {"t.f32", GgufType::f32},      {"t.bool", GgufType::boolean}, {"t.string", GgufType::string},
      {"t.u64", GgufType::u64},      {"t.i64", GgufType::i64},      {"t.f64", GgufType::f64},
      {"t.tokens", GgufType::array}, {"t.scores", GgufType::array}, {"t.types", GgufType::array},
      {"t.empty", GgufType::array},  {"t.bools", GgufType::array},  {"t.nested", GgufType::array}};
  ASSERT_EQ(f->keys().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(f->keys()[i].name, expected[i].first);
    EXPECT_EQ(f->keys()[i].type, expected[i].second) << expected[i].first;
    EXPECT_TRUE(f->has(expected[i].first));
    EXPECT_EQ(f->value(expected[i].first).value().type(), expected[i].second);
  }
  EXPECT_EQ(std::get<uint8_t>(f->value("t.u8").value().v), 200);
  EXPECT_EQ(std::get<int16_t>(f->value("t.i16").value().v), -30000);
  EXPECT_EQ(std::get<double>(f->value("t.f64").value().v), 0.1);
  GgufValue empty = f->value("t.empty").value();
  EXPECT_EQ(empty.array_type, GgufType::u16);
  EXPECT_TRUE(std::get<GgufValue::Array>(empty.v).empty());
  GgufValue bools = f->value("t.bools").value();
  ASSERT_EQ(std::get<GgufValue::Array>(bools.v).size(), 2u);
  EXPECT_EQ(std::get<bool>(std::get<GgufValue::Array>(bools.v)[1].v), true);
  GgufValue nested = f->value("t.nested").value();
  EXPECT_EQ(nested.array_type, GgufType::array);
  const auto& outer = std::get<GgufValue::Array>(nested.v);
  ASSERT_EQ(outer.size(), 2u);
  EXPECT_EQ(outer[0].array_type, GgufType::string);
  EXPECT_EQ(std::get<std::string>(std::get<GgufValue::Array>(outer[0].v)[1].v), "bc");
  EXPECT_EQ(f->find_key("t.nested")->array_count, 2u);
  EXPECT_EQ(f->find_key("t.nested")->array_type, GgufType::array);
}

TEST(GgufFileGetters, ConvertFittingValuesAndNameTheKeyOtherwise) {
  GgufWriter w;
  ASSERT_TRUE(w.add_i32("neg", -1).ok());
  ASSERT_TRUE(w.add_string("name", "x").ok());
  ASSERT_TRUE(w.add_f64("big", 1e300).ok());
  ASSERT_TRUE(w.add_u64("huge", 1ull << 35).ok());
  auto f = open_ok(w.encode().value());
  ASSERT_TRUE(f);

  auto neg = f->get_u32("neg");
  EXPECT_EQ(neg.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(neg.status().message().find("'neg'"), std::string::npos) << neg.status().message();
  EXPECT_EQ(f->get_i64("neg").value(), -1);
  EXPECT_FALSE(f->get_i32("huge").ok());
  EXPECT_FALSE(f->get_f32("big").ok());  // beyond float's range
  EXPECT_EQ(f->get_f64("big").value(), 1e300);

  auto wrong = f->get_u32("name");
  EXPECT_EQ(wrong.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(wrong.status().message().find("'name' is string"), std::string::npos) << wrong.status().message();
  EXPECT_FALSE(f->get_string_array("name").ok());

  EXPECT_EQ(f->get_u32("missing").status().code(), StatusCode::not_found);
  EXPECT_FALSE(f->has("missing"));
  EXPECT_EQ(f->get_u32("missing", 7).value(), 7u);
  EXPECT_EQ(f->get_string("missing", "dflt").value(), "dflt");
  EXPECT_EQ(f->get_bool("missing", true).value(), true);
  EXPECT_FALSE(f->get_u32("name", 7).ok());  // present with the wrong type: still an error
}

// Every supported tensor type, 1 to 4 dims; the bytes come back untouched
// and every tensor starts on the alignment.
class GgufTensorRoundTrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufTensorRoundTrip, EverySupportedTypeKeepsItsBytes) {
  const uint32_t alignment = GetParam();
  struct Case {
    const char* name;
    DType type;
    std::vector<int64_t> ne;
  };
  const std::vector<Case> cases = {
      {"a.f32", DType::f32, {3}},       {"b.f16", DType::f16, {5, 3}},          {"c.bf16", DType::bf16, {7, 2, 2}},
      {"d.q8_0", DType::q8_0, {64, 3}}, {"e.q4_0", DType::q4_0, {32, 2, 1, 3}}, {"f.i32", DType::i32, {1, 1, 1, 9}},
      {"g.empty", DType::f32, {0, 4}}};
  GgufWriter w(alignment);
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    uint64_t n = row_bytes(c.type, c.ne[0]);
    for (size_t d = 1; d < c.ne.size(); ++d) n *= c.ne[d];
    data.push_back(random_bytes(n, static_cast<uint32_t>(i)));
    ASSERT_TRUE(w.add_tensor(c.name, c.type, c.ne, data.back()).ok());
  }
  auto f = open_ok(w.encode().value());
  ASSERT_TRUE(f);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->has("general.alignment"), alignment != 32);
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  ASSERT_EQ(f->tensors().size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensorInfo* t = f->tensor(cases[i].name);
    ASSERT_NE(t, nullptr) << cases[i].name;
    EXPECT_EQ(&f->tensors()[i], t);
    EXPECT_EQ(t->type, cases[i].type);
    EXPECT_EQ(t->n_dims, static_cast<int>(cases[i].ne.size()));
    for (int d = 0; d < 4; ++d) EXPECT_EQ(t->ne[d], d < t->n_dims ? cases[i].ne[d] : 1);
    EXPECT_EQ(t->offset % alignment, 0u);
    EXPECT_EQ(t->nbytes, data[i].size());
    EXPECT_EQ(std::vector<uint8_t>(t->bytes.begin(), t->bytes.end()), data[i]) << cases[i].name;
  }
  EXPECT_EQ(f->tensor("nope"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufTensorRoundTrip, ::testing::Values(32u, 64u, 1u));

// The format pinned without the writer: a v3 file with one key and one f32
// [4, 2] tensor, every byte spelled out. The writer must produce exactly it.
TEST(GgufFormat, HandBuiltMinimalFileReadsAndMatchesTheWriter) {
  const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  GgufBytes b;
  b.raw("GGUF", 4).u32(3).u64(1).u64(1);              // magic, version, 1 tensor, 1 key
  b.str("general.architecture").u32(8).str("llama");  // key, type string, value
  b.str("w").u32(2).u64(4).u64(2).u32(0).u64(0);      // name, 2 dims, 4 x 2, f32, offset 0
  ASSERT_EQ(b.bytes.size(), 24u + 8 + 20 + 4 + 8 + 5 + 8 + 1 + 4 + 16 + 4 + 8);
  b.pad_to(32).raw(values, sizeof values);  // the data section at 128

  auto opened = GgufFile::open_memory(b.bytes);  // borrows b.bytes: no copy
  ASSERT_TRUE(opened.ok()) << opened.status().to_string();
  const auto& f = *opened;
  EXPECT_EQ(f->data_offset(), 128u);
  EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
  const GgufTensorInfo* t = f->tensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::f32);
  EXPECT_EQ(t->ne, (std::array<int64_t, 4>{4, 2, 1, 1}));
  EXPECT_EQ(t->bytes.data(), b.bytes.data() + 128);
  EXPECT_EQ(std::memcmp(t->bytes.data(), values, sizeof values), 0);

  GgufWriter w;
  ASSERT_TRUE(w.add_string("general.architecture", "llama").ok());
  const int64_t ne[] = {4, 2};
  ASSERT_TRUE(w.add_tensor("w", DType::f32, ne, {reinterpret_cast<const uint8_t*>(values), sizeof values}).ok());
  EXPECT_EQ(w.encode().value(), b.bytes);

  // Version 2 has the same layout and is read too.
  std::vector<uint8_t> v2 = b.bytes;
  v2[4] = 2;
  auto f2 = open_ok(v2);
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2->version(), 2u);
}

TEST(GgufFormat, WriteIsAtomicAndOpenMapsTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("gguf_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "m.gguf").string();
  GgufWriter w(64);
  ASSERT_TRUE(w.add_u32("k", 5).ok());
  const std::vector<uint8_t> data = random_bytes(34 * 2, 9);
  const int64_t ne[] = {64};
  ASSERT_TRUE(w.add_tensor("q", DType::q8_0, ne, data).ok());
  ASSERT_TRUE(w.write(path).ok());
  ASSERT_TRUE(w.write(path).ok());                                            // over an existing file
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temporary left

  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->size(), std::filesystem::file_size(path));
  EXPECT_EQ(std::vector<uint8_t>((*f)->tensor("q")->bytes.begin(), (*f)->tensor("q")->bytes.end()), data);

  Status bad = w.write((dir / "no-such-dir" / "m.gguf").string());
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(GgufFile::open((dir / "absent.gguf").string()).status().code(), StatusCode::not_found);
  EXPECT_FALSE(GgufFile::open(dir.string()).ok());  // a directory
  std::filesystem::remove_all(dir);
}

TEST(GgufWriterProducers, BytesMadeAtWriteTimeLandWhereBorrowedOnesWould) {
  const std::vector<uint8_t> a = random_bytes(34 * 2, 3), b = random_bytes(4 * 6, 4);
  const int64_t ne_a[] = {64}, ne_b[] = {3, 2};
  GgufWriter eager(64), lazy(64);
  ASSERT_TRUE(eager.add_tensor("a", DType::q8_0, ne_a, a).ok());
  ASSERT_TRUE(eager.add_tensor("b", DType::f32, ne_b, b).ok());
  int calls = 0;
  ASSERT_TRUE(lazy.add_tensor_producer("a", DType::q8_0, ne_a,
                                       [&]() -> StatusOr<std::vector<uint8_t>> {
                                         ++calls;
                                         return a;
                                       })
                  .ok());
  ASSERT_TRUE(lazy.add_tensor_producer("b", DType::f32, ne_b,
                                       [&]() -> StatusOr<std::vector<uint8_t>> {
                                         ++calls;
                                         return b;
                                       })
                  .ok());
  EXPECT_EQ(calls, 0);  // nothing is made before the file is written
  EXPECT_EQ(lazy.encode().value(), eager.encode().value());
  EXPECT_EQ(calls, 2);
}

TEST(GgufWriterProducers, AWrongSizeOrAnErrorFailsTheWriteAndLeavesNoFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("gguf_producer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const int64_t ne[] = {64};
  GgufWriter short_bytes;
  ASSERT_TRUE(short_bytes
                  .add_tensor_producer("a", DType::q8_0, ne,
                                       []() -> StatusOr<std::vector<uint8_t>> { return std::vector<uint8_t>(10); })
                  .ok());
  const Status s = short_bytes.write((dir / "m.gguf").string());
  EXPECT_NE(s.message().find("made 10 bytes, its shape needs 68"), std::string::npos) << s.to_string();
  GgufWriter failing;
  ASSERT_TRUE(failing
                  .add_tensor_producer("a", DType::q8_0, ne,
                                       []() -> StatusOr<std::vector<uint8_t>> { return io_error("disk on fire"); })
                  .ok());
  EXPECT_NE(failing.write((dir / "m.gguf").string()).message().find("disk on fire"), std::string::npos);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 0);  // no file, no temporary
  const int64_t odd[] = {65};
  EXPECT_FALSE(failing
                   .add_tensor_producer("b", DType::q8_0, odd,
                                        [] { return StatusOr<std::vector<uint8_t>>(std::vector<uint8_t>()); })
                   .ok());
  std::filesystem::remove_all(dir);
}

TEST(GgufTensors, DescriptorsMatchAndBytesUploadIntoABuffer) {
  GgufWriter w;
  const std::vector<uint8_t> a = random_bytes(18 * 2 * 3, 1), b = random_bytes(4 * 5, 2);
  const int64_t ne_a[] = {64, 3}, ne_b[] = {5};
  ASSERT_TRUE(w.add_tensor("a", DType::q4_0, ne_a, a).ok());
  ASSERT_TRUE(w.add_tensor("b", DType::i32, ne_b, b).ok());
  const std::vector<uint8_t> bytes = w.encode().value();
  auto f = open_ok(bytes);
  ASSERT_TRUE(f);

  Context ctx;
  auto tensors = new_gguf_tensors(ctx, *f);
  ASSERT_TRUE(tensors.ok()) << tensors.status().to_string();
  ASSERT_EQ(tensors->size(), 2u);
  Tensor* ta = (*tensors)[0];
  EXPECT_EQ(ta->name, "a");
  EXPECT_EQ(ta->type, DType::q4_0);
  EXPECT_EQ(ta->ne, (std::array<int64_t, 4>{64, 3, 1, 1}));
  EXPECT_TRUE(ta->is_contiguous());
  EXPECT_TRUE(ta->flags & kFlagWeight);

  CpuDevice dev;
  auto buf = dev.allocate(1024);
  ASSERT_TRUE(buf.ok());
  EXPECT_FALSE(upload_gguf_tensor(*f->tensor("a"), *ta).ok());  // not placed yet
  ASSERT_TRUE((*buf)->place(*ta, 0).ok());
  ASSERT_TRUE((*buf)->place(*(*tensors)[1], 512).ok());
  ASSERT_TRUE(upload_gguf_tensor(*f->tensor("a"), *ta).ok());
  ASSERT_TRUE(upload_gguf_tensor(*f->tensor("b"), *(*tensors)[1]).ok());
  std::vector<uint8_t> back(a.size());
  ASSERT_TRUE((*buf)->get(*ta, back.data(), 0, back.size()).ok());
  EXPECT_EQ(back, a);
  EXPECT_FALSE(upload_gguf_tensor(*f->tensor("b"), *ta).ok());  // other type and shape
}

}  // namespace
}  // namespace tensorpc
