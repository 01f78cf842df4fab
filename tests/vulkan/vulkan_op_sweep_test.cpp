// The sweep of every op the Vulkan device computes, with every type it takes,
// against the CPU device, saying what it compared: one line of (op: types)
// on stdout and as the test's "covered" property. It fails where the device
// supports an op and type the sweep did not compare, so a new shader needs
// its case here.
#include <iostream>
#include <map>
#include <set>

#include "vulkan_test_util.h"

namespace tensorpc::test {
namespace {

constexpr Tolerance kF32{1e-4, 1e-5};
constexpr Tolerance kF16{2e-3, 1e-4};

// The types an op is told apart by: a matrix product's and get_rows' weight
// (src[0]), any other op's result.
bool reads_weights(Op op) { return op == Op::mul_mat || op == Op::get_rows || op == Op::mul_mat_id; }
DType key_type(const Tensor& node) { return reads_weights(node.op) ? node.src[0]->type : node.type; }

// Every type a tensor may have.
constexpr DType kAllTypes[] = {DType::f32,  DType::f16,  DType::bf16,   DType::q8_0,   DType::q4_0,  DType::q4_1,
                               DType::q5_0, DType::q5_1, DType::q2_K,   DType::q3_K,   DType::q4_K,  DType::q5_K,
                               DType::q6_K, DType::q8_K, DType::iq4_nl, DType::iq4_xs, DType::mxfp4, DType::i32};

// A node of op whose key type is `type` where op has such a form (weights or
// a result of that type), else null. The switch names every op: a new one
// does not compile until it has a probe.
Tensor* probe(Context& ctx, Op op, DType type) {
  const bool weight = type != DType::i32 && type != DType::q8_K;
  Tensor* x = ctx.new_tensor(DType::f32, {256, 4});
  Tensor* rows = ctx.new_tensor(DType::i32, {4});
  switch (op) {
    case Op::none:
    case Op::view:
    case Op::reshape:
    case Op::permute:
    case Op::transpose: return nullptr;  // nothing to compute
    case Op::add: return ctx.add(x, x);
    case Op::sub: return ctx.sub(x, x);
    case Op::mul: return ctx.mul(x, x);
    case Op::div: return ctx.div(x, x);
    case Op::scale: return ctx.scale(x, 2.0f);
    case Op::silu: return ctx.silu(x);
    case Op::gelu: return ctx.gelu(x);
    case Op::tanh: return ctx.tanh(x);
    case Op::sigmoid: return ctx.sigmoid(x);
    case Op::swiglu: return ctx.swiglu(x, x);
    case Op::swiglu_clamp: return ctx.swiglu_clamp(x, x, 1.702f, 7.0f);
    case Op::diag_mask_inf: return ctx.diag_mask_inf(x, 0);
    case Op::rms_norm: return ctx.rms_norm(x, 1e-6f);
    case Op::norm: return ctx.norm(x, 1e-6f);
    case Op::soft_max: return ctx.soft_max(ctx.reshape(x, {256, 2, 2}), nullptr, 1.0f, ctx.new_tensor(DType::f32, {2}));
    case Op::rope: return ctx.rope(ctx.reshape(x, {64, 4, 4}), rows, 64, kRopeNeox);
    case Op::concat: return type == DType::i32 ? ctx.concat(rows, rows, 0) : ctx.concat(x, x, 1);
    case Op::argmax: return ctx.argmax(x);
    case Op::top_k: return ctx.top_k(x, 3);
    case Op::top_k_ids: return ctx.top_k_ids(x, 3);
    case Op::cpy: return weight ? ctx.cast(x, type) : nullptr;
    case Op::set_rows: return weight ? ctx.set_rows(ctx.new_tensor(type, {256, 8}), x, rows) : nullptr;
    case Op::get_rows: return weight ? ctx.get_rows(ctx.new_tensor(type, {256, 8}), rows) : nullptr;
    case Op::mul_mat: return weight ? ctx.mul_mat(ctx.new_tensor(type, {256, 8}), x) : nullptr;
    case Op::mul_mat_id:
      return weight ? ctx.mul_mat_id(ctx.new_tensor(type, {256, 8, 3}), ctx.reshape(x, {256, 1, 4}),
                                     ctx.new_tensor(DType::i32, {2, 4}))
                    : nullptr;
    case Op::sample:
      return ctx.sample(ctx.new_tensor(DType::f32, {8, 2}), ctx.new_tensor(DType::i32, {4}),
                        ctx.new_tensor(DType::i32, {2}), SampleSettings{}, 100);
  }
  return nullptr;
}

struct Case {
  std::string name;
  GraphBuilder build;
  GraphBuilder reference;  // the CPU's graph: build's, or with the weights dequantized
  Tolerance tol;
  int32_t index_range = 1;
};

// A matrix op of weights of `type` against the CPU's of them dequantized.
Case weight_case(DType type) {
  const auto build = [type](bool dequantize) {
    return [type, dequantize](Context& ctx) -> std::vector<Tensor*> {
      Tensor* w = input(ctx, type, {256, 7, 3});
      Tensor* f = dequantize ? ctx.cast(w, DType::f32) : w;
      Tensor* b = input(ctx, DType::f32, {256, 1, 5});
      return {ctx.mul_mat(f, input(ctx, DType::f32, {256, 2, 3})), ctx.get_rows(f, input(ctx, DType::i32, {4, 3})),
              ctx.mul_mat_id(f, b, input(ctx, DType::i32, {2, 5}))};
    };
  };
  return {std::string("weights ") + name_of(type), build(false), build(true), {1e-4, 1e-4}, 4};
}

std::vector<Case> sweep() {
  std::vector<Case> cases;
  const auto add = [&](std::string name, GraphBuilder build, Tolerance tol, int32_t index_range = 1) {
    cases.push_back({std::move(name), build, build, tol, index_range});
  };
  add(
      "element-wise",
      [](Context& ctx) -> std::vector<Tensor*> {
        Tensor* x = input(ctx, DType::f32, {37, 5, 2});
        Tensor* y = input(ctx, DType::f32, {37, 5, 2});
        Tensor* r = input(ctx, DType::f32, {37, 1, 2});
        return {ctx.add(x, r),
                ctx.sub(x, y),
                ctx.mul(x, r),
                ctx.div(x, ctx.add(ctx.mul(y, y), ctx.scale(r, 0.0f))),
                ctx.scale(x, 3.0f),
                ctx.silu(x),
                ctx.gelu(x),
                ctx.tanh(x),
                ctx.sigmoid(x),
                ctx.swiglu(x, y),
                ctx.swiglu_clamp(ctx.scale(x, 9.0f), ctx.scale(y, 9.0f), 1.702f, 7.0f),
                ctx.diag_mask_inf(x, 1)};
      },
      kF32);
  add(
      "rows",
      [](Context& ctx) -> std::vector<Tensor*> {
        Tensor* x = input(ctx, DType::f32, {61, 6, 3});
        return {ctx.rms_norm(x, 1e-6f),
                ctx.norm(x, 1e-5f),
                ctx.argmax(x),
                ctx.top_k(x, 5),
                ctx.top_k_ids(x, 4),
                ctx.soft_max(x, input(ctx, DType::f32, {61, 6}), 0.5f, input(ctx, DType::f32, {3}))};
      },
      kF32);
  add(
      "rope",
      [](Context& ctx) -> std::vector<Tensor*> {
        return {ctx.rope(input(ctx, DType::f32, {32, 2, 5}), input(ctx, DType::i32, {5}), 32, kRopeNeox)};
      },
      {1e-4, 3e-4}, 97);
  add(
      "concat",
      [](Context& ctx) -> std::vector<Tensor*> {
        return {ctx.concat(input(ctx, DType::f32, {5, 3}), input(ctx, DType::f32, {5, 2}), 1),
                ctx.concat(input(ctx, DType::i32, {5, 3}), input(ctx, DType::i32, {4, 3}), 0)};
      },
      kF32, 1000);
  for (DType type : {DType::f16, DType::bf16}) {
    add(
        std::string("cpy ") + name_of(type),
        [type](Context& ctx) -> std::vector<Tensor*> {
          Tensor* x = input(ctx, DType::f32, {9, 7});
          return {ctx.cast(ctx.cast(ctx.transpose(x), type), DType::f32), ctx.cont(ctx.transpose(x))};
        },
        type == DType::f16 ? kF16 : Tolerance{0, 0});
  }
  for (DType type : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0}) {
    add(
        std::string("set_rows ") + name_of(type),
        [type](Context& ctx) -> std::vector<Tensor*> {
          return {
              ctx.set_rows(input(ctx, type, {64, 7}), input(ctx, DType::f32, {64, 3}), input(ctx, DType::i32, {3}))};
        },
        type == DType::f16 ? kF16 : Tolerance{0, 0}, 7);
  }
  for (DType type : kAllTypes) {
    if (type != DType::i32 && type != DType::q8_K && type != DType::mxfp4) cases.push_back(weight_case(type));
  }
  return cases;
}

TEST(VulkanOpSweep, ComparesEveryOpAndTypeTheDeviceSupports) {
  TENSORPC_VULKAN_DEVICE_OR_SKIP(dev);
  std::set<std::pair<Op, DType>> covered;
  for (const Case& c : sweep()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(matches_cpu(*dev, c.build, c.reference, c.tol, c.index_range));
    Context ctx;
    const Graph graph = Graph::build(c.build(ctx));
    for (const Tensor* node : graph.nodes()) {
      if (node->op != Op::none && !is_view_op(node->op)) covered.insert({node->op, key_type(*node)});
    }
  }
  std::map<Op, std::string> by_op;
  for (const auto& [op, type] : covered) by_op[op] += std::string(by_op[op].empty() ? "" : " ") + name_of(type);
  std::string line;
  for (const auto& [op, types] : by_op) line += std::string(line.empty() ? "" : "; ") + name_of(op) + ": " + types;
  std::cout << "Vulkan op sweep compared " << covered.size() << " (op, type) pairs: " << line << "\n";
  RecordProperty("covered", line);

  for (uint32_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    for (DType type : kAllTypes) {
      Context ctx;
      const Tensor* node = probe(ctx, op, type);
      if (node == nullptr || key_type(*node) != type || !dev->supports(*node)) continue;
      EXPECT_TRUE(covered.count({op, type}) != 0)
          << "the device supports " << name_of(op) << " of " << name_of(type) << " but the sweep compares none";
    }
  }
}

}  // namespace
}  // namespace tensorpc::test
