// Every op computed on a remote device equals the local CPU device bit for
// bit: the same graph is built twice, one copy placed by a GraphAllocator on
// a RemoteDevice of an in-process server, one on a local CpuDevice with the
// same options as the server's, given the same input bytes; the outputs'
// bytes must be identical. This checks the whole path — placement through
// the remote device's alignment, uploads, the graph encoding with views and
// strides, the server's decoding and execution, and downloads — without
// re-deriving any op's math (the CPU tests do that).
#include "remote_test_util.h"

namespace tensorpc::test {
namespace {

struct OpCase {
  std::string name;
  Builder build;
};
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

std::vector<OpCase> op_cases() {
  std::vector<OpCase> cases;
  const auto add = [&](std::string name, Builder b) { cases.push_back({std::move(name), std::move(b)}); };

  for (Op op : {Op::add, Op::sub, Op::mul, Op::div}) {
    add(std::string("binary_") + name_of(op), [op](Context& c) {
      Tensor* a = input(c, DType::f32, {64, 6, 3, 2});
      Tensor* b = input(c, DType::f32, {64, 1, 3, 1});  // broadcast over dims 1 and 3
      Tensor* r = op == Op::add ? c.add(a, b) : op == Op::sub ? c.sub(a, b) : op == Op::mul ? c.mul(a, b) : c.div(a, b);
      return Built{{r}, {}};
    });
  }
  add("scale", [](Context& c) { return Built{{c.scale(input(c, DType::f32, {96, 5}), -0.37f)}, {}}; });
  add("silu", [](Context& c) { return Built{{c.silu(input(c, DType::f32, {128, 7}))}, {}}; });
  add("gelu", [](Context& c) { return Built{{c.gelu(input(c, DType::f32, {128, 7}))}, {}}; });
  add("swiglu", [](Context& c) {
    return Built{{c.swiglu(input(c, DType::f32, {80, 4}), input(c, DType::f32, {80, 4}))}, {}};
  });
  for (DType w : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::q5_0,
                  DType::q5_1, DType::iq4_nl, DType::q2_K, DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K,
                  DType::iq4_xs}) {
    add(std::string("mul_mat_") + name_of(w), [w](Context& c) {
      Tensor* a = input(c, w, {256, 48, 2, 1});  // weights [K, M], broadcast over b's dim 2
      Tensor* b = input(c, DType::f32, {256, 5, 4, 1});
      return Built{{c.mul_mat(a, b)}, {}};
    });
  }
  add("mul_mat_transposed_view", [](Context& c) {
    Tensor* a = input(c, DType::f32, {32, 64});
    Tensor* b = input(c, DType::f32, {64, 3});
    return Built{{c.mul_mat(c.cont(c.transpose(a)), b)}, {}};
  });
  for (DType src : {DType::f32, DType::f16, DType::q8_0, DType::q5_1, DType::q4_K, DType::q6_K, DType::iq4_xs}) {
    add(std::string("get_rows_") + name_of(src), [src](Context& c) {
      Tensor* table = input(c, src, {256, 10, 2});
      Tensor* rows = input(c, DType::i32, {4, 2});
      return Built{{c.get_rows(table, rows)}, {{rows, {9, 0, 3, 3, 1, 8, 2, 7}}}};
    });
  }
  for (DType to : {DType::f16, DType::q8_0, DType::q4_0}) {
    add(std::string("cpy_to_") + name_of(to), [to](Context& c) {
      Tensor* x = input(c, DType::f32, {128, 6});
      Tensor* dst = input(c, to, {128, 6});
      return Built{{c.cpy(x, dst)}, {}};
    });
  }
  add("cast_f16", [](Context& c) { return Built{{c.cast(input(c, DType::f32, {64, 9}), DType::f16)}, {}}; });
  add("rms_norm", [](Context& c) { return Built{{c.rms_norm(input(c, DType::f32, {256, 6}), 1e-6f)}, {}}; });
  add("norm", [](Context& c) { return Built{{c.norm(input(c, DType::f32, {256, 6}), 1e-5f)}, {}}; });
  for (int mode : {kRopeNormal, kRopeNeox}) {
    add(mode == kRopeNormal ? "rope_normal" : "rope_neox", [mode](Context& c) {
      Tensor* x = input(c, DType::f32, {64, 4, 5, 1});
      Tensor* pos = input(c, DType::i32, {5});
      return Built{{c.rope(x, pos, 48, mode, 10000.0f, 1.0f)}, {{pos, {0, 1, 2, 17, 300}}}};
    });
  }
  add("rope_freq_factors", [](Context& c) {
    Tensor* x = input(c, DType::f32, {64, 4, 5, 1});
    Tensor* pos = input(c, DType::i32, {5});
    Tensor* factors = input(c, DType::f32, {24});  // random values, as the test writes every input
    RopeParams p;
    p.n_dims = 48;
    p.mode = kRopeNeox;
    p.freq_base = 500000.0f;
    return Built{{c.rope(x, pos, p, factors)}, {{pos, {0, 1, 2, 17, 300}}}};
  });
  for (int mode : {kRopeNormal, kRopeNeox}) {
    add(mode == kRopeNormal ? "rope_yarn_normal" : "rope_yarn_neox", [mode](Context& c) {
      Tensor* x = input(c, DType::f32, {64, 4, 5, 1});
      Tensor* pos = input(c, DType::i32, {5});
      RopeParams p = test::yarn_rope_params(mode);
      p.attn_factor = 0.9f;
      return Built{{c.rope(x, pos, p)}, {{pos, {0, 5, 4095, 4096, 16000}}}};
    });
  }
  add("tanh", [](Context& c) { return Built{{c.tanh(input(c, DType::f32, {128, 7}))}, {}}; });
  add("soft_max_with_mask", [](Context& c) {
    Tensor* x = input(c, DType::f32, {32, 6, 3});
    Tensor* mask = input(c, DType::f32, {32, 8});
    return Built{{c.soft_max(x, mask, 0.125f)}, {}};
  });
  add("soft_max_plain", [](Context& c) { return Built{{c.soft_max(input(c, DType::f32, {100, 7}))}, {}}; });
  add("diag_mask_inf", [](Context& c) { return Built{{c.diag_mask_inf(input(c, DType::f32, {16, 8, 2}), 3)}, {}}; });
  add("concat", [](Context& c) {
    return Built{{c.concat(input(c, DType::f32, {32, 3, 2}), input(c, DType::f32, {32, 5, 2}), 1)}, {}};
  });
  add("argmax", [](Context& c) { return Built{{c.argmax(input(c, DType::f32, {50, 9, 2}))}, {}}; });
  add("top_k", [](Context& c) { return Built{{c.top_k(input(c, DType::f32, {500, 3, 2}), 20)}, {}}; });
  add("sample", [](Context& c) {
    // Candidates from top_k, as a decode step makes them; a penalty on two of
    // the recent ids and a draw that is not at either end.
    Tensor* recent = input(c, DType::i32, {4});
    Tensor* draw = input(c, DType::i32, {2});
    SampleSettings s{.temperature = 0.9f, .top_k = 12, .top_p = 0.9f, .min_p = 0.01f, .repeat_penalty = 1.3f};
    Tensor* token = c.sample(c.top_k(input(c, DType::f32, {500}), 30), recent, draw, s, 500);
    return Built{{token}, {{recent, {3, 17, -1, 3}}, {draw, {0x5bd1e995, 0x000abcde}}}};
  });
  // Mixture of experts (1.12). ids are data: one of them outside the experts.
  for (DType w : {DType::f32, DType::bf16, DType::q4_0, DType::q5_1, DType::q4_K, DType::iq4_xs}) {
    add(std::string("mul_mat_id_") + name_of(w), [w](Context& c) {
      Tensor* experts = input(c, w, {256, 40, 5});
      Tensor* ids = input(c, DType::i32, {2, 3});
      Tensor* one = c.mul_mat_id(experts, input(c, DType::f32, {256, 1, 3}), ids);   // a row per token
      Tensor* each = c.mul_mat_id(experts, input(c, DType::f32, {256, 2, 3}), ids);  // a row per slot
      return Built{{one, each}, {{ids, {4, 0, 2, 2, 5, 1}}}};
    });
  }
  add("mul_mat_id_prefill", [](Context& c) {
    Tensor* experts = input(c, DType::q8_0, {64, 33, 4});
    Tensor* ids = input(c, DType::i32, {2, 10});
    return Built{{c.mul_mat_id(experts, input(c, DType::f32, {64, 1, 10}), ids)},
                 {{ids, {3, 1, 0, 3, 2, 1, 3, 0, -1, 2, 1, 0, 3, 2, 2, 3, 0, 1, 1, 3}}}};
  });
  add("top_k_ids", [](Context& c) { return Built{{c.top_k_ids(input(c, DType::f32, {32, 3, 2, 2}), 4)}, {}}; });
  add("swiglu_clamp", [](Context& c) {
    Tensor* a = input(c, DType::f32, {80, 4});  // random values in [-1, 1]: scaled past the limit below
    Tensor* b = input(c, DType::f32, {80, 4});
    return Built{{c.swiglu_clamp(c.scale(a, 10.0f), c.scale(b, 10.0f), 1.702f, 7.0f)}, {}};
  });
  // Sinks without a mask: src[1] absent, src[2] present, on the wire.
  add("soft_max_sinks", [](Context& c) {
    return Built{{c.soft_max(input(c, DType::f32, {32, 6, 3}), nullptr, 0.125f, input(c, DType::f32, {3}))}, {}};
  });
  add("soft_max_sinks_with_mask", [](Context& c) {
    Tensor* x = input(c, DType::f32, {32, 6, 3});
    return Built{{c.soft_max(x, input(c, DType::f32, {32, 8}), 0.125f, input(c, DType::f32, {3}))}, {}};
  });
  add("moe_block", [](Context& c) {
    // A router choosing 2 of 4 experts per token, their gate and up, the
    // clamped SwiGLU, and their down projection: gpt-oss's FFN.
    Tensor* x = input(c, DType::f32, {64, 3});
    Tensor* router = input(c, DType::f32, {64, 4});
    Tensor* ids = c.top_k_ids(c.mul_mat(router, x), 2);  // [2, 3]
    Tensor* xb = c.reshape(x, {64, 1, 3});
    Tensor* g = c.mul_mat_id(input(c, DType::q8_0, {64, 96, 4}), xb, ids);
    Tensor* u = c.mul_mat_id(input(c, DType::q8_0, {64, 96, 4}), xb, ids);
    Tensor* h = c.swiglu_clamp(g, u, 1.702f, 7.0f);
    return Built{{c.mul_mat_id(input(c, DType::q4_0, {96, 64, 4}), h, ids), ids}, {}};
  });
  add("views_permute_reshape", [](Context& c) {
    Tensor* x = input(c, DType::f32, {16, 6, 4, 2});
    Tensor* p = c.cont(c.permute(x, 2, 0, 1, 3));                      // a strided source materialised
    Tensor* r = c.reshape(p, {16 * 6, 4, 2});                          // a view of the result
    Tensor* v = c.view(x, {8, 6, 4}, {4, x->nb[1], x->nb[2]}, 8 * 4);  // the upper half of each row
    return Built{{c.scale(r, 2.0f), c.add(c.cont(v), c.cont(v))}, {}};
  });
  add("attention_block", [](Context& c) {
    // q·kᵀ, scaled and causally masked softmax, times v: the views and
    // permutes of a transformer's attention, end to end.
    Tensor* q = input(c, DType::f32, {32, 4, 6});  // [head_dim, heads, tokens]
    Tensor* k = input(c, DType::f32, {32, 4, 6});
    Tensor* v = input(c, DType::f32, {32, 4, 6});
    Tensor* pos = input(c, DType::i32, {6});
    Tensor* qr = c.permute(c.rope(q, pos, 32, kRopeNeox), 0, 2, 1, 3);  // [d, T, H]
    Tensor* kr = c.permute(c.rope(k, pos, 32, kRopeNeox), 0, 2, 1, 3);
    Tensor* kq = c.soft_max(c.diag_mask_inf(c.mul_mat(kr, qr), 0), nullptr, 0.176f);  // [Tk, Tq, H]
    Tensor* vt = c.cont(c.permute(v, 1, 2, 0, 3));                                    // [T, d, H]
    Tensor* out = c.cont(c.permute(c.mul_mat(vt, kq), 0, 2, 1, 3));
    return Built{{out}, {{pos, {0, 1, 2, 3, 4, 5}}}};
  });
  return cases;
}

class RemoteOps : public ::testing::TestWithParam<OpCase> {
 protected:
  static void SetUpTestSuite() { server_ = std::make_unique<InProcessServer>(); }
  static void TearDownTestSuite() { server_.reset(); }
  static std::unique_ptr<InProcessServer> server_;
};
std::unique_ptr<InProcessServer> RemoteOps::server_;

INSTANTIATE_TEST_SUITE_P(Remote, RemoteOps, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

TEST_P(RemoteOps, EqualsLocalCpuBitForBit) {
  auto devices = connect_devices(server_->endpoint());
  ASSERT_TRUE(devices.ok()) << devices.status().to_string();
  ASSERT_EQ(devices.value().size(), 1u);
  Device& remote = *devices.value()[0];
  CpuDevice local(CpuDeviceOptions{.threads = 2});

  const auto want = run_on(local, GetParam().build);
  const auto got = run_on(remote, GetParam().build);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << "output " << i;
    size_t differing = 0;
    for (size_t j = 0; j < got[i].size(); ++j) differing += got[i][j] != want[i][j];
    EXPECT_EQ(differing, 0u) << "output " << i << ": " << differing << " of " << got[i].size() << " bytes differ";
  }
  // Everything was freed with the graphs: the connection went with them.
  EXPECT_TRUE(eventually([] { return server_->stats().sessions == 0 && server_->stats().live_buffers == 0; }));
}

}  // namespace
}  // namespace tensorpc::test
