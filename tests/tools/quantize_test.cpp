// `tensorpc quantize`: the files it writes from the bundled model (every key
// kept, the expected types, loadable), the K types on a model whose rows they
// fit, and the errors for bad input. The per-tensor rules are in
// quantize_mix_test.cpp.
#include "tensorpc/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <type_traits>
#include <variant>

#include "file_util.h"
#include "lab/random_model.h"
#include "model/arch/llama_model.h"
#include "model/gguf/gguf.h"
#include "model/quantize/quantize_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/placement.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/demo.h"
#include "test_util.h"

namespace tensorpc::tools {
namespace {

using test::Capture;
using test::contains;
using test::ScopedTempDir;

// ---- the bundled model ------------------------------------------------------

// The types the bundled model's tensors get (4 layers, rows of 128 and 384,
// GQA 2: every K type falls back), for the tensors that tell the mixes apart.
struct BundledCase {
  const char* mix;
  DType embd, attn_q, attn_v0, attn_v3, ffn_down0, ffn_down2, output;
};
const BundledCase kBundled[] = {
    {"Q4_0", DType::q4_0, DType::q4_0, DType::q4_0, DType::q4_0, DType::q4_0, DType::q4_0, DType::q8_0},
    {"Q4_1", DType::q4_1, DType::q4_1, DType::q4_1, DType::q4_1, DType::q4_1, DType::q4_1, DType::q8_0},
    {"Q5_0", DType::q5_0, DType::q5_0, DType::q5_0, DType::q5_0, DType::q5_0, DType::q5_0, DType::q8_0},
    {"Q5_1", DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q8_0},
    {"Q8_0", DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0},
    {"Q2_K", DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::q8_0},
    {"Q3_K_M", DType::iq4_nl, DType::iq4_nl, DType::q5_1, DType::q5_0, DType::q5_0, DType::q5_0, DType::q8_0},
    {"Q4_K_S", DType::q5_0, DType::q5_0, DType::q5_1, DType::q5_1, DType::q5_0, DType::q5_0, DType::q8_0},
    {"Q4_K_M", DType::q5_0, DType::q5_0, DType::q5_0, DType::q8_0, DType::q5_0, DType::q8_0, DType::q8_0},
    {"Q5_K_S", DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q5_1, DType::q8_0},
    {"Q5_K_M", DType::q5_1, DType::q5_1, DType::q5_1, DType::q8_0, DType::q5_1, DType::q8_0, DType::q8_0},
    {"Q6_K", DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0},
    {"IQ4_NL", DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::q8_0},
    {"IQ4_XS", DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::iq4_nl, DType::q8_0},
    {"F16", DType::f16, DType::f16, DType::f16, DType::f16, DType::f16, DType::f16, DType::f16},
    {"BF16", DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::bf16, DType::bf16},
    {"F32", DType::f32, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32, DType::f32},
};

// Whether two metadata values are equal, arrays element by element.
bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.v.index() != b.v.index()) return false;
  if (a.type() == GgufType::array) {
    const auto& x = std::get<GgufValue::Array>(a.v);
    const auto& y = std::get<GgufValue::Array>(b.v);
    if (a.array_type != b.array_type || x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!same_value(x[i], y[i])) return false;
    }
    return true;
  }
  return std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, GgufValue::Array>) {
          return false;  // handled above
        } else {
          return x == std::get<T>(b.v);
        }
      },
      a.v);
}

class QuantizeBundled : public ::testing::TestWithParam<BundledCase> {};

TEST_P(QuantizeBundled, WritesAFileWithEveryKeyTheExpectedTypesAndALoadableModel) {
  const BundledCase& c = GetParam();
  ScopedTempDir dir;
  const std::string out_path = dir.path + "/out.gguf";
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), out_path, c.mix, 2}, out.f, err.f), 0) << err.text();
  EXPECT_TRUE(contains(out.text(), "size: 2.6 MiB -> ")) << out.text();

  auto in = GgufFile::open(bundled_model_path()).value();
  auto q = GgufFile::open(out_path);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  const GgufFile& f = *q.value();
  EXPECT_EQ(f.alignment(), in->alignment());
  // Every key of the input, in order, with its value; general.file_type the mix's.
  for (const GgufKeyInfo& k : in->keys()) {
    ASSERT_TRUE(f.has(k.name)) << k.name;
    if (k.name == "general.file_type") continue;
    EXPECT_TRUE(same_value(f.value(k.name).value(), in->value(k.name).value())) << k.name;
  }
  EXPECT_EQ(f.get_u32("general.file_type").value(), mix_info(*parse_quant_mix(c.mix)).file_type);
  EXPECT_EQ(f.get_u32("general.quantization_version").value(), 2u);

  ASSERT_EQ(f.tensors().size(), in->tensors().size());
  const std::map<std::string, DType> want = {{"token_embd.weight", c.embd},
                                             {"blk.1.attn_q.weight", c.attn_q},
                                             {"blk.0.attn_v.weight", c.attn_v0},
                                             {"blk.3.attn_v.weight", c.attn_v3},
                                             {"blk.0.ffn_down.weight", c.ffn_down0},
                                             {"blk.2.ffn_down.weight", c.ffn_down2},
                                             {"output.weight", c.output},
                                             {"blk.2.ffn_norm.weight", DType::f32},
                                             {"output_norm.weight", DType::f32}};
  for (const auto& [name, type] : want) EXPECT_EQ(name_of(f.tensor(name)->type), name_of(type)) << name;
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    EXPECT_EQ(f.tensors()[i].name, in->tensors()[i].name);
    EXPECT_EQ(f.tensors()[i].ne, in->tensors()[i].ne);
  }
  auto model = LlamaModel::open(out_path, {.digest_dir = ""});
  EXPECT_TRUE(model.ok()) << model.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(QuantizeEveryMix, QuantizeBundled, ::testing::ValuesIn(kBundled),
                         [](const auto& info) { return std::string(info.param.mix); });

TEST(Quantize, ATensorIsEachOfItsRowsThroughF32AndTheThreadCountChangesNoByte) {
  ScopedTempDir dir;
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), dir.path + "/1.gguf", "q4_0", 1}, out.f, err.f), 0);
  ASSERT_EQ(quantize_command({bundled_model_path(), dir.path + "/7.gguf", "q4_0", 7}, out.f, err.f), 0);
  EXPECT_EQ(test::read_file(dir.path + "/1.gguf"), test::read_file(dir.path + "/7.gguf"));

  auto in = GgufFile::open(bundled_model_path()).value();
  auto q = GgufFile::open(dir.path + "/1.gguf").value();
  const GgufTensorInfo& src = *in->tensor("blk.1.ffn_up.weight");
  std::vector<float> f32(static_cast<size_t>(src.nelements()));
  traits(src.type).to_float(src.bytes.data(), f32.data(), src.nelements());
  std::vector<uint8_t> want(row_bytes(DType::q4_0, src.nelements()));
  traits(DType::q4_0).from_float(f32.data(), want.data(), src.nelements());
  const GgufTensorInfo& got = *q->tensor("blk.1.ffn_up.weight");
  EXPECT_EQ(std::vector<uint8_t>(got.bytes.begin(), got.bytes.end()), want);
  // A tensor whose type does not change is copied as it is.
  const GgufTensorInfo& norm = *q->tensor("output_norm.weight");
  const GgufTensorInfo& norm_in = *in->tensor("output_norm.weight");
  EXPECT_TRUE(std::equal(norm.bytes.begin(), norm.bytes.end(), norm_in.bytes.begin(), norm_in.bytes.end()));
}

TEST(Quantize, AQuantizedInputIsDequantizedBeforeItIsQuantizedAgain) {
  ScopedTempDir dir;
  const std::string q8 = dir.path + "/q8.gguf", q4 = dir.path + "/q4.gguf";
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), q8, "Q8_0", 2}, out.f, err.f), 0) << err.text();
  ASSERT_EQ(quantize_command({q8, q4, "Q4_0", 2}, out.f, err.f), 0) << err.text();
  auto in = GgufFile::open(q8).value();
  auto q = GgufFile::open(q4).value();
  const GgufTensorInfo& src = *in->tensor("blk.0.attn_q.weight");
  ASSERT_EQ(src.type, DType::q8_0);
  std::vector<float> f32(static_cast<size_t>(src.nelements()));
  traits(DType::q8_0).to_float(src.bytes.data(), f32.data(), src.nelements());
  std::vector<uint8_t> want(row_bytes(DType::q4_0, src.nelements()));
  traits(DType::q4_0).from_float(f32.data(), want.data(), src.nelements());
  const GgufTensorInfo& got = *q->tensor("blk.0.attn_q.weight");
  ASSERT_EQ(got.type, DType::q4_0);
  EXPECT_EQ(std::vector<uint8_t>(got.bytes.begin(), got.bytes.end()), want);
  EXPECT_EQ(q->tensor("output.weight")->type, DType::q8_0);  // q6_K's fallback, copied as it is
}

TEST(Quantize, EachFallbackIsNamedAndProgressIsALinePerTensorOffATerminal) {
  ScopedTempDir dir;
  Capture out, err;
  ASSERT_EQ(quantize_command({bundled_model_path(), dir.path + "/m.gguf", "Q4_K_M", 2}, out.f, err.f), 0);
  const std::string e = err.text();
  EXPECT_TRUE(contains(e, "blk.0.attn_q.weight: rows of 128 are not a multiple of 256 (the block of q4_K): using q5_0"))
      << e;
  EXPECT_TRUE(contains(e, "output.weight: rows of 128 are not a multiple of 256 (the block of q6_K): using q8_0")) << e;
  EXPECT_TRUE(contains(e, "[39/39] output.weight")) << e;
  EXPECT_TRUE(contains(out.text(), "Q4_K_M (general.file_type 15), 39 tensors, 30 fallbacks")) << out.text();
}

// ---- K types, on a model whose rows they fit ----------------------------------

// A random f32 model with rows of 256 and four query heads per kv head: no
// fallbacks, so each mix runs its own K types. Its logits after a prompt,
// quantized, stay within `error` (relative RMS) of the f32 model's.
struct KCase {
  const char* mix;
  DType attn_q, attn_v1, ffn_down1, output;
  double error;
};

std::vector<float> logits_after_prompt(const std::string& path) {
  auto model = LlamaModel::open(path, {.digest_dir = ""}).value();
  CpuDevice cpu(CpuDeviceOptions{.threads = 2});
  PlacementOptions p;
  p.n_ctx = 64;
  auto placement = ModelPlacement::create(*model, {&cpu}, p).value();
  Generator gen(*model, *placement);
  return gen.eval(model->tokenizer().encode("In the beginning God created the heaven and the earth.")).value();
}

// The f32 model and its logits, made once for every case.
struct RandomF32Model {
  RandomF32Model() {
    const Status s = write_random_llama(path, {.n_vocab = 320,
                                               .n_embd = 256,
                                               .n_layer = 2,
                                               .n_head = 4,
                                               .n_head_kv = 1,
                                               .n_ff = 256,
                                               .n_ctx = 64,
                                               .type = DType::f32,
                                               .seed = 5});
    if (!s.ok()) throw Error(s);
    logits = logits_after_prompt(path);
  }
  ScopedTempDir dir;
  std::string path = dir.path + "/f32.gguf";
  std::vector<float> logits;
};

class QuantizeKTypes : public ::testing::TestWithParam<KCase> {};

TEST_P(QuantizeKTypes, TensorsGetTheMixsKTypesAndTheLogitsStayClose) {
  static const RandomF32Model f32;
  const KCase& c = GetParam();
  ScopedTempDir dir;
  const std::string q = dir.path + "/q.gguf";
  Capture out, err;
  ASSERT_EQ(quantize_command({f32.path, q, c.mix, 2}, out.f, err.f), 0) << err.text();
  EXPECT_TRUE(contains(out.text(), " 0 fallbacks")) << out.text();
  auto file = GgufFile::open(q).value();
  EXPECT_EQ(name_of(file->tensor("blk.0.attn_q.weight")->type), name_of(c.attn_q));
  EXPECT_EQ(name_of(file->tensor("blk.1.attn_v.weight")->type), name_of(c.attn_v1));
  EXPECT_EQ(name_of(file->tensor("blk.1.ffn_down.weight")->type), name_of(c.ffn_down1));
  EXPECT_EQ(name_of(file->tensor("output.weight")->type), name_of(c.output));

  const std::vector<float> got = logits_after_prompt(q);
  ASSERT_EQ(got.size(), f32.logits.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - f32.logits[i]) * (got[i] - f32.logits[i]);
    norm += f32.logits[i] * f32.logits[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), c.error) << c.mix;
}

// Two layers: use_more_bits picks layer 1, n/8 and n/16 pick none. The
// bounds are about 1.5 times the errors measured: Q2_K 0.470, Q3_K_M 0.305,
// Q4_K_S 0.142, Q4_K_M 0.138, Q5_K_S 0.069, Q5_K_M 0.069, Q6_K 0.044, IQ4_XS
// 0.145, IQ4_NL 0.145, Q4_0 0.169, Q8_0 0.019 (random weights: every layer
// adds to the error, unlike a trained model's).
INSTANTIATE_TEST_SUITE_P(
    QuantizeKMixes, QuantizeKTypes,
    ::testing::Values(KCase{"Q2_K", DType::q2_K, DType::q4_K, DType::q3_K, DType::q6_K, 0.7},
                      KCase{"Q3_K_M", DType::q3_K, DType::q5_K, DType::q4_K, DType::q6_K, 0.45},
                      KCase{"Q4_K_S", DType::q4_K, DType::q5_K, DType::q4_K, DType::q6_K, 0.21},
                      KCase{"Q4_K_M", DType::q4_K, DType::q6_K, DType::q6_K, DType::q6_K, 0.21},
                      KCase{"Q5_K_S", DType::q5_K, DType::q5_K, DType::q5_K, DType::q6_K, 0.1},
                      KCase{"Q5_K_M", DType::q5_K, DType::q6_K, DType::q6_K, DType::q6_K, 0.1},
                      KCase{"Q6_K", DType::q6_K, DType::q6_K, DType::q6_K, DType::q6_K, 0.065},
                      KCase{"IQ4_XS", DType::iq4_xs, DType::q5_K, DType::iq4_xs, DType::q6_K, 0.22},
                      KCase{"IQ4_NL", DType::iq4_nl, DType::q5_K, DType::iq4_nl, DType::q6_K, 0.22},
                      KCase{"Q4_0", DType::q4_0, DType::q4_0, DType::q4_0, DType::q6_K, 0.25},
                      KCase{"Q8_0", DType::q8_0, DType::q8_0, DType::q8_0, DType::q8_0, 0.03}),
    [](const auto& info) { return std::string(info.param.mix); });

// ---- bad input --------------------------------------------------------------

TEST(Quantize, BadInputIsOneLineAndExitCodeOneOrTwoAndLeavesNoFile) {
  ScopedTempDir dir;
  const std::string out_path = dir.path + "/out.gguf";
  const auto one_line_with = [](const Capture& err, const std::string& part) {
    const std::string e = err.text();
    EXPECT_TRUE(contains(e, part)) << e;
    EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 1) << e;
  };
  {
    Capture out, err;
    EXPECT_EQ(quantize_command({dir.path + "/missing.gguf", out_path, "Q8_0", 1}, out.f, err.f), 1);
    one_line_with(err, "cannot read " + dir.path + "/missing.gguf");
  }
  {
    test::TempFile text("In the beginning God created the heaven and the earth.\n");
    Capture out, err;
    EXPECT_EQ(quantize_command({text.path, out_path, "Q8_0", 1}, out.f, err.f), 1);
    one_line_with(err, "cannot read " + text.path);
  }
  {
    Capture out, err;
    EXPECT_EQ(quantize_command({bundled_model_path(), out_path, "Q7_K", 1}, out.f, err.f), 2);
    one_line_with(err, "unknown type 'Q7_K' (valid: Q4_0, Q4_1,");
  }
  {
    // The output names the input, also through another spelling of the path.
    std::filesystem::copy_file(bundled_model_path(), dir.path + "/in.gguf");
    const std::string before = test::read_file(dir.path + "/in.gguf");
    Capture out, err;
    EXPECT_EQ(quantize_command({dir.path + "/in.gguf", dir.path + "/./in.gguf", "Q8_0", 1}, out.f, err.f), 1);
    one_line_with(err, "is the input");
    EXPECT_EQ(test::read_file(dir.path + "/in.gguf"), before);
    std::filesystem::remove(dir.path + "/in.gguf");
  }
  {
    Capture out, err;
    EXPECT_EQ(quantize_command({bundled_model_path(), dir.path + "/no/such/dir/out.gguf", "Q8_0", 1}, out.f, err.f), 1);
    one_line_with(err, "cannot write " + dir.path + "/no/such/dir/out.gguf");
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path), {}), 0);  // nothing written, no temporary
}

}  // namespace
}  // namespace tensorpc::tools
