// The llama forward pass against the plain reference written with straight
// loops in double precision (reference_decoder.h): prefill, then decode with
// the KV cache. arch_test.cpp does the same for every architecture.
#include "model/arch/llama.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/arch/reference_checks.h"
#include "model/arch/reference_decoder.h"
#include "model/arch/tiny_llama.h"
#include "tensorpc/cpu_device.h"
#include "tensorpc/graph_allocator.h"

namespace tensorpc {
namespace {

using reference::expect_logits_close;
using reference::Mat;
using RefLayer = reference::ReferenceLayer;

class LlamaForward : public ::testing::Test {
 protected:
  void SetUp() override {
    hp = test::tiny_llama_hparams();
    ASSERT_TRUE(hp.validate().ok());
    ref.c.n_vocab = hp.n_vocab;
    ref.c.n_embd = hp.n_embd;
    ref.c.n_head = hp.n_head;
    ref.c.n_head_kv = hp.n_head_kv;
    ref.c.head_dim = hp.head_dim();
    ref.c.n_ff = hp.n_ff;
    ref.c.n_rot = hp.n_rot;
    ref.c.norm_eps = hp.norm_eps;
    ref.c.freq_base = hp.rope_freq_base;

    // Every weight: a tensor in one CPU buffer, and its values in the
    // reference, in the order tiny_llama_weights makes them.
    ref.layers.resize(2);
    std::vector<Mat*> targets = {&ref.embd};
    for (RefLayer& R : ref.layers) {
      for (Mat* m : {&R.attn_norm, &R.wq, &R.wk, &R.wv, &R.wo, &R.ffn_norm, &R.gate, &R.up, &R.down}) {
        targets.push_back(m);
      }
    }
    targets.push_back(&ref.out_norm);
    targets.push_back(&ref.out);
    std::vector<std::pair<Tensor*, Mat*>> all;
    w = test::tiny_llama_weights(hp, [&](std::initializer_list<int64_t> ne, bool norm) {
      Tensor* t = wctx.new_tensor(DType::f32, ne);
      Mat* m = targets[all.size()];
      m->resize(static_cast<size_t>(t->nelements()));
      std::normal_distribution<double> d(norm ? 1.0 : 0.0, norm ? 0.1 : 0.15);
      for (double& v : *m) v = d(rng);
      all.push_back({t, m});
      return t;
    });
    ASSERT_TRUE(w.validate(hp).ok());

    cache.n_ctx = 64;
    for (int l = 0; l < 2; ++l) {
      cache.k.push_back(wctx.new_tensor(DType::f32, {hp.kv_dim(), cache.n_ctx}));
      cache.v.push_back(wctx.new_tensor(DType::f32, {cache.n_ctx, hp.kv_dim()}));
    }
    uint64_t bytes = 0;
    for (auto& [t, m] : all) bytes += (t->nbytes() + 63) / 64 * 64;
    for (Tensor* t : cache.k) bytes += (t->nbytes() + 63) / 64 * 64;
    for (Tensor* t : cache.v) bytes += (t->nbytes() + 63) / 64 * 64;
    buffer = dev.allocate(bytes).value();
    ASSERT_TRUE(buffer->clear(0).ok());  // an empty cache holds zeros, never garbage
    uint64_t off = 0;
    auto place = [&](Tensor* t) {
      ASSERT_TRUE(buffer->place(*t, off).ok());
      off += (t->nbytes() + 63) / 64 * 64;
    };
    for (auto& [t, m] : all) {
      place(t);
      std::vector<float> f(m->begin(), m->end());
      for (size_t i = 0; i < f.size(); ++i) (*m)[i] = f[i];  // the reference uses the stored (f32) values
      ASSERT_TRUE(write_from_f32(*t, f).ok());
    }
    for (Tensor* t : cache.k) place(t);
    for (Tensor* t : cache.v) place(t);
  }

  // Runs one step of `tokens` starting at position `pos`; returns logits [n_out][n_vocab].
  std::vector<float> step(const std::vector<int32_t>& tokens, int pos, bool all_logits) {
    return test::run_llama_step(dev, hp, w, cache, tokens, pos, all_logits);
  }

  std::mt19937 rng{7};
  LlamaHparams hp;
  LlamaWeights w;
  KvCache cache;
  Context wctx;
  CpuDevice dev{{.threads = 2}};
  std::unique_ptr<Buffer> buffer;
  reference::ReferenceDecoder ref;
};

TEST_F(LlamaForward, PrefillThenDecodeMatchesTheReference) {
  const std::vector<int32_t> prompt = {3, 17, 5, 40, 22};
  const std::vector<float> prefill = step(prompt, 0, /*all_logits=*/true);
  for (size_t t = 0; t < prompt.size(); ++t) {
    const Mat want = ref.forward(prompt[t], static_cast<int>(t));
    expect_logits_close(std::vector<float>(prefill.begin() + t * hp.n_vocab, prefill.begin() + (t + 1) * hp.n_vocab),
                        want, "prefill");
  }
  // Decode: one token at a time, reading what the prefill cached.
  int pos = static_cast<int>(prompt.size());
  for (int32_t token : {9, 31, 2, 47}) {
    const std::vector<float> got = step({token}, pos, false);
    expect_logits_close(got, ref.forward(token, pos), "decode");
    ++pos;
  }
}

TEST_F(LlamaForward, LastTokenLogitsEqualThoseOfTheFullPrefill) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const std::vector<float> last = step(prompt, 0, false);
  ASSERT_EQ(last.size(), static_cast<size_t>(hp.n_vocab));
  expect_logits_close(
      last,
      [&] {
        Mat m;
        for (size_t t = 0; t < prompt.size(); ++t) m = ref.forward(prompt[t], static_cast<int>(t));
        return m;
      }(),
      "last token");
}

TEST(LlamaHparams, RejectsInconsistentShapes) {
  LlamaHparams hp = test::tiny_llama_hparams();  // 4 heads of 16 dims
  hp.n_head_kv = 3;
  EXPECT_NE(hp.validate().message().find("kv heads"), std::string::npos) << hp.validate().message();
  hp.n_head_kv = 2;
  EXPECT_TRUE(hp.validate().ok());
  hp.n_rot = 18;
  EXPECT_FALSE(hp.validate().ok());
}

TEST(KvWindow, GrowsInStepsAndStopsAtTheContext) {
  EXPECT_EQ(kv_window(1, 100, 32), 32);
  EXPECT_EQ(kv_window(32, 100, 32), 32);
  EXPECT_EQ(kv_window(33, 100, 32), 64);
  EXPECT_EQ(kv_window(99, 100, 32), 100);
}

}  // namespace
}  // namespace tensorpc
