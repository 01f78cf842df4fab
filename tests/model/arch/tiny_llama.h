// A two-layer llama small enough to check op by op: its hyper-parameters, its
// weights made by the caller (who chooses types and values), and one forward
// step on a device. llama_test.cpp checks it against the reference decoder;
// the Vulkan tests run it on the Vulkan device against the CPU device.
#pragma once

#include <functional>
#include <initializer_list>
#include <vector>

#include "model/arch/llama.h"
#include "tensorpc/device.h"
#include "tensorpc/graph_allocator.h"
#include "test_util.h"

namespace tensorpc::test {

// 48 tokens, 64 wide, 4 heads over 2 KV heads, 16 rotated dims.
inline LlamaHparams tiny_llama_hparams() {
  LlamaHparams hp{.n_vocab = 48, .n_ctx_train = 64, .n_embd = 64, .n_layer = 2, .n_head = 4, .n_head_kv = 2};
  hp.n_ff = 96;
  hp.n_rot = 16;
  return hp;
}

// Makes one weight of shape ne; norm: a norm's weight (f32, values near 1).
using MakeWeight = std::function<Tensor*(std::initializer_list<int64_t> ne, bool norm)>;

// The weights of hp, made in this order: tok_embd; per layer attn_norm, wq,
// wk, wv, wo, ffn_norm, ffn_gate, ffn_up, ffn_down; output_norm, output.
inline LlamaWeights tiny_llama_weights(const LlamaHparams& hp, const MakeWeight& make) {
  LlamaWeights w;
  w.tok_embd = make({hp.n_embd, hp.n_vocab}, false);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    LlamaLayerWeights L;
    L.attn_norm = make({hp.n_embd}, true);
    L.wq = make({hp.n_embd, hp.n_embd}, false);
    L.wk = make({hp.n_embd, hp.kv_dim()}, false);
    L.wv = make({hp.n_embd, hp.kv_dim()}, false);
    L.wo = make({hp.n_embd, hp.n_embd}, false);
    L.ffn_norm = make({hp.n_embd}, true);
    L.ffn_gate = make({hp.n_embd, hp.n_ff}, false);
    L.ffn_up = make({hp.n_embd, hp.n_ff}, false);
    L.ffn_down = make({hp.n_ff, hp.n_embd}, false);
    w.layers.push_back(L);
  }
  w.output_norm = make({hp.n_embd}, true);
  w.output = make({hp.n_embd, hp.n_vocab}, false);
  return w;
}

// One step of `tokens` from position `pos` on dev, whose buffers hold w and
// cache: the logits of every token (all_logits) or of the last.
inline std::vector<float> run_llama_step(Device& dev, const LlamaHparams& hp, const LlamaWeights& w,
                                         const KvCache& cache, const std::vector<int32_t>& tokens, int pos,
                                         bool all_logits) {
  Context ctx;
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t n_kv = kv_window(pos + n, cache.n_ctx, 16);
  LlamaStep s = build_llama_step(ctx, hp, w, cache, n, n_kv, all_logits);
  Graph g = Graph::build({s.logits});
  GraphAllocator alloc(dev);
  EXPECT_TRUE(alloc.allocate(g).ok());
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = pos + static_cast<int32_t>(i);
  EXPECT_TRUE(s.tokens->buffer->set(*s.tokens, tokens.data(), 0, 4 * tokens.size()).ok());
  EXPECT_TRUE(s.positions->buffer->set(*s.positions, positions.data(), 0, 4 * positions.size()).ok());
  EXPECT_TRUE(write_from_f32(*s.mask, causal_mask(positions, n_kv)).ok());
  const Status computed = dev.create_stream().value()->compute(g);
  EXPECT_TRUE(computed.ok()) << computed.to_string();
  return read_as_f32(*s.logits).value();
}

}  // namespace tensorpc::test
