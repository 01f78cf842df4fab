// Embeddings (embedding.h): the pooled vector is the mean, first or last of
// the model's own per-token hidden states (Generator::eval_hidden), of unit
// length; an input gives the same vector batched with others, in turns or
// alone, locally or split over a server's devices; and embedding on a free
// sequence does not change what another sequence, mid-generation, generates.
#include "model/runtime/embedding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "api/device_set.h"
#include "lab/random_model.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/server.h"

namespace tensorpc {
namespace {

class Embedding : public ::testing::Test {
 protected:
  void SetUp() override {
    path =
        (std::filesystem::temp_directory_path() / ("tensorpc_embedding_test_" + std::to_string(::getpid()) + ".gguf"))
            .string();
    ASSERT_TRUE(tools::write_random_llama(path, tools::RandomModelOptions{}).ok());
    auto m = LlamaModel::open(path);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(m).value();
    auto p = ModelPlacement::create(*model, {&cpu}, {.n_ctx = 192});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    placement = std::move(p).value();
  }
  void TearDown() override {
    placement.reset();
    model.reset();
    std::filesystem::remove(path);
  }
  std::vector<int32_t> tokens(const std::string& text) const { return model->tokenizer().encode(text); }
  int64_t n_embd() const { return model->hparams().n_embd; }

  std::string path;
  CpuDevice cpu{{.threads = 2}};
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<ModelPlacement> placement;
};

double length(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += static_cast<double>(x) * x;
  return std::sqrt(sum);
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << "at " << i;
}

TEST_F(Embedding, PoolsTheModelsOwnHiddenStatesAsMeanClsOrLast) {
  Generator gen(*model, *placement);
  const std::vector<int32_t> text = tokens("the quick brown fox jumps over the lazy dog");
  const auto n = static_cast<int64_t>(text.size());
  ASSERT_GT(n, 4);
  const SequenceTokens whole{0, text};
  auto hidden = gen.eval_hidden(std::span<const SequenceTokens>(&whole, 1));
  ASSERT_TRUE(hidden.ok()) << hidden.status().to_string();
  ASSERT_EQ(static_cast<int64_t>(hidden.value().size()), n * n_embd());
  ASSERT_TRUE(gen.rewind(0).ok());
  const auto row = [&](int64_t t, int64_t i) { return hidden.value()[static_cast<size_t>(t * n_embd() + i)]; };

  // They are what the output projection takes: W_out times each row is that token's logits.
  auto logits = gen.eval_all(text);
  ASSERT_TRUE(logits.ok()) << logits.status().to_string();
  ASSERT_TRUE(gen.rewind(0).ok());
  const Tensor& w_out = *model->weights().output;
  ASSERT_EQ(w_out.type, DType::f32);
  std::vector<float> w(static_cast<size_t>(w_out.nelements()));
  ASSERT_TRUE(w_out.buffer->get(w_out, w.data(), 0, w_out.nbytes()).ok());
  const int64_t n_vocab = model->hparams().n_vocab;
  for (int64_t t : {int64_t{0}, n - 1}) {
    for (int64_t v = 0; v < n_vocab; v += 17) {
      double dot = 0;
      for (int64_t i = 0; i < n_embd(); ++i) dot += w[static_cast<size_t>(v * n_embd() + i)] * row(t, i);
      EXPECT_NEAR(logits.value()[static_cast<size_t>(t * n_vocab + v)], dot, 1e-3) << "token " << t << ", logit " << v;
    }
  }

  std::vector<float> mean(static_cast<size_t>(n_embd())), first(mean.size()), last(mean.size());
  for (int64_t i = 0; i < n_embd(); ++i) {
    double sum = 0;
    for (int64_t t = 0; t < n; ++t) sum += row(t, i);
    mean[static_cast<size_t>(i)] = static_cast<float>(sum / static_cast<double>(n));
    first[static_cast<size_t>(i)] = row(0, i);
    last[static_cast<size_t>(i)] = row(n - 1, i);
  }
  const std::vector<std::vector<int32_t>> inputs{text};
  const int64_t seq = 0;
  for (const auto& [pooling, want] : {std::pair{Pooling::mean, mean}, {Pooling::cls, first}, {Pooling::last, last}}) {
    // In steps of 3 tokens, the hidden states come in pieces and pool the same.
    auto raw =
        embed(gen, inputs, std::span<const int64_t>(&seq, 1), {.pooling = pooling, .normalize = false, .n_batch = 3});
    ASSERT_TRUE(raw.ok()) << raw.status().to_string();
    ASSERT_EQ(raw.value().size(), 1u);
    expect_near(raw.value()[0], want, 1e-4f);

    auto unit = embed(gen, inputs, std::span<const int64_t>(&seq, 1), {.pooling = pooling});
    ASSERT_TRUE(unit.ok()) << unit.status().to_string();
    EXPECT_NEAR(length(unit.value()[0]), 1.0, 1e-5);
    std::vector<float> scaled = want;
    for (float& x : scaled) x = static_cast<float>(x / length(want));
    expect_near(unit.value()[0], scaled, 1e-4f);
  }
  EXPECT_EQ(gen.position(0), 0) << "embed() leaves its sequences at the start";
}

TEST_F(Embedding, AnInputGivesTheSameVectorBatchedInTurnsOrAlone) {
  const std::vector<std::vector<int32_t>> inputs{tokens("a short one"), tokens("the second text is a little longer"),
                                                 tokens("and a third, different from both")};
  Generator three(*model, *placement, {.n_seq = 3});
  const std::vector<int64_t> seqs{0, 1, 2};
  auto together = embed(three, inputs, seqs, {.n_batch = 8});  // one step carries parts of several
  ASSERT_TRUE(together.ok()) << together.status().to_string();
  ASSERT_EQ(together.value().size(), 3u);

  const int64_t seq = 1;
  auto in_turns = embed(three, inputs, std::span<const int64_t>(&seq, 1), {.n_batch = 5});
  ASSERT_TRUE(in_turns.ok()) << in_turns.status().to_string();
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_NEAR(length(together.value()[i]), 1.0, 1e-5);
    expect_near(in_turns.value()[i], together.value()[i], 1e-4f);

    Generator alone(*model, *placement);
    const int64_t zero = 0;
    auto single = embed(alone, std::span(&inputs[i], 1), std::span<const int64_t>(&zero, 1), {});
    ASSERT_TRUE(single.ok()) << single.status().to_string();
    expect_near(single.value()[0], together.value()[i], 1e-4f);
  }
  // Different texts, different vectors.
  EXPECT_GT(std::abs(together.value()[0][0] - together.value()[1][0]) +
                std::abs(together.value()[0][1] - together.value()[1][1]),
            1e-4f);
}

// Greedy tokens of sequence 0 from `prompt`, `n` of them; after `embed_after`
// of them (when >= 0), an embedding on sequence 1.
std::vector<int32_t> greedy_with_embedding(const LlamaModel& model, ModelPlacement& placement,
                                           const std::vector<int32_t>& prompt, int n, int embed_after,
                                           const std::vector<int32_t>& text) {
  Generator gen(model, placement, {.n_batch = 4, .n_seq = 2});
  std::vector<int32_t> out;
  std::vector<int32_t> next = prompt;
  for (int i = 0; i < n; ++i) {
    const SequenceTokens step{0, next};
    auto logits = gen.eval_batch(std::span<const SequenceTokens>(&step, 1));
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return out;
    const auto& l = logits.value();
    out.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
    next = {out.back()};
    if (i == embed_after) {
      const int64_t seq = 1;
      auto v = embed(gen, std::span(&text, 1), std::span<const int64_t>(&seq, 1), {.n_batch = 4});
      EXPECT_TRUE(v.ok()) << v.status().to_string();
      EXPECT_EQ(gen.position(0), static_cast<int64_t>(prompt.size()) + i);
    }
  }
  return out;
}

TEST_F(Embedding, DoesNotChangeWhatAnotherSequenceGenerates) {
  const std::vector<int32_t> prompt = tokens("once upon a time there");
  const std::vector<int32_t> text = tokens("a text to embed while the other sequence is generating, long enough");
  const std::vector<int32_t> plain = greedy_with_embedding(*model, *placement, prompt, 16, -1, text);
  ASSERT_EQ(plain.size(), 16u);
  EXPECT_EQ(greedy_with_embedding(*model, *placement, prompt, 16, 5, text), plain);
}

TEST_F(Embedding, RefusesWhatNoStepCanRun) {
  Generator gen(*model, *placement, {.n_seq = 2});
  const int64_t seq = 0, twice[] = {1, 1}, outside = 2;
  const std::vector<std::vector<int32_t>> empty{{}};
  EXPECT_FALSE(embed(gen, empty, std::span<const int64_t>(&seq, 1), {}).ok());
  const std::vector<std::vector<int32_t>> long_one{std::vector<int32_t>(static_cast<size_t>(gen.seq_ctx() + 1), 5)};
  auto too_long = embed(gen, long_one, std::span<const int64_t>(&seq, 1), {});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("holds " + std::to_string(gen.seq_ctx())), std::string::npos);
  const std::vector<std::vector<int32_t>> fine{{5, 6}};
  EXPECT_FALSE(embed(gen, fine, twice, {}).ok());
  EXPECT_FALSE(embed(gen, fine, std::span<const int64_t>(&outside, 1), {}).ok());
  const std::vector<std::vector<int32_t>> bad_token{{5, 1 << 20}};
  EXPECT_FALSE(embed(gen, bad_token, std::span<const int64_t>(&seq, 1), {}).ok());
  EXPECT_EQ(gen.position(0), 0);
}

TEST_F(Embedding, TheFilesPoolingTypeChoosesThePooling) {
  EXPECT_EQ(model->hparams().pooling, Pooling::mean) << "a file that names none pools by mean";
  for (const auto& [type, want] :
       {std::pair{0, Pooling::none}, {1, Pooling::mean}, {2, Pooling::cls}, {3, Pooling::last}}) {
    tools::RandomModelOptions o;
    o.pooling_type = type;
    auto bytes = tools::random_model_bytes(o);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto m = LlamaModel::open_memory(bytes.value(), "pooling");
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m.value()->hparams().pooling, want) << type;
  }
  tools::RandomModelOptions rank;
  rank.pooling_type = 4;  // rank: a score for a pair of texts
  auto bytes = tools::random_model_bytes(rank);
  ASSERT_TRUE(bytes.ok());
  auto refused = LlamaModel::open_memory(bytes.value(), "rank");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("llama.pooling_type"), std::string::npos) << refused.status().to_string();
}

TEST_F(Embedding, OverAServersDevicesEqualsLocal) {
  const std::vector<std::vector<int32_t>> inputs{tokens("split over two devices"), tokens("of one server")};
  const std::vector<int64_t> seqs{0, 1};
  std::vector<std::vector<float>> local;
  {
    Generator here(*model, *placement, {.n_seq = 2});
    auto b = embed(here, inputs, seqs, {.n_batch = 6});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    local = std::move(b).value();
  }
  placement.reset();  // a model's weights are placed once at a time

  ServerOptions o;
  o.port = 0;
  o.devices = {std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu0", .threads = 1}),
               std::make_shared<CpuDevice>(CpuDeviceOptions{.name = "cpu1", .threads = 1})};
  auto server = Server::start(o);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  auto devices = DeviceSet::connect({}, 0, {"127.0.0.1:" + std::to_string(server.value()->port())});
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  const std::vector<Device*> list = devices.value().devices();
  ASSERT_EQ(list.size(), 2u);
  auto remote = ModelPlacement::create(*model, list, {.ratios = {1.0, 1.0}, .n_ctx = 192});
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  Generator there(*model, *remote.value(), {.n_seq = 2});
  auto a = embed(there, inputs, seqs, {.n_batch = 6});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_GT(there.totals().round_trips, 0u) << "the steps ran on the server";
  for (size_t i = 0; i < inputs.size(); ++i) expect_near(a.value()[i], local[i], 1e-4f);
}

}  // namespace
}  // namespace tensorpc
