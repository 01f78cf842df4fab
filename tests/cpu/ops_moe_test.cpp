// The mixture-of-experts ops on the CPU: mul_mat_id, top_k_ids, swiglu_clamp
// and soft_max's attention sinks (op.h).
//
// mul_mat_id is checked kernel table by kernel table (portable, AVX2 and
// AVX-512, where this CPU has them), its kernel called directly by 1, 2 and
// 3 threads, against a straight loop over exactly what the kernel is to
// multiply: the experts' weights as their type's to_float decodes them, and
// b's rows in the weight kernel's vec-dot type as the same table quantizes
// them, decoded back. The one error allowed is the float summation's, 2e-5
// of sum |a||b| as the kernel tests allow it (tests/cpu/kernels_quant_test.cpp);
// a row whose id is not an expert must be exactly zeros. The other ops, and
// mul_mat_id in a graph (a router, the expert FFN of gpt-oss), run on the CPU
// device with every CpuConfig against double-precision formulas.
#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>
#include <thread>

#include "cpu/barrier.h"
#include "cpu/kernels.h"
#include "cpu/op_kernels.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const std::vector<DType>& weight_types() {
  static const std::vector<DType> types = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,   DType::q4_0,
                                           DType::q4_1, DType::q5_0, DType::q5_1, DType::iq4_nl, DType::q2_K,
                                           DType::q3_K, DType::q4_K, DType::q5_K, DType::q6_K,   DType::iq4_xs};
  return types;
}

// The smallest K of whole blocks of the type, and more than one of them
// where blocks are small; any K for the float types (not a multiple of 8).
int64_t test_k(DType type) {
  if (block_size(type) == 1) return 44;
  return block_size(type) == 32 ? 96 : 256;
}

const cpu::KernelTable* table_named(const std::string& name) {
  if (name == "portable") return &cpu::portable_kernels();
  if (name == "avx2") return cpu::avx2_kernels();
  return cpu::avx512_kernels();
}

// Bytes for tensors outside any device: 64-byte aligned, filled with a
// pattern, owned here.
class HostBytes {
 public:
  char* place(Tensor* t, uint8_t fill) {
    auto& block = blocks_.emplace_back(t->nbytes() + 64, fill);
    const auto misalign = reinterpret_cast<uintptr_t>(block.data()) % 64;
    t->data = block.data() + (misalign ? 64 - misalign : 0);
    return static_cast<char*>(t->data);
  }

 private:
  std::vector<std::vector<uint8_t>> blocks_;
};

// Runs dst's CPU kernel with `table` on nth threads, as CpuDevice::compute
// runs a node: its work size of scratch (filled with a pattern, not zeros),
// one barrier, nth chunk counters at zero. The bytes past the work size
// must stay as they were.
void run_kernel(const cpu::KernelTable& table, Tensor& dst, int nth) {
  const cpu::OpEntry& entry = cpu::op_entry(dst.op);
  ASSERT_NE(entry.kernel, nullptr) << name_of(dst.op);
  const size_t wsize = entry.work_size ? entry.work_size(dst, nth) : 0;
  constexpr size_t kGuard = 256;
  std::vector<uint8_t> scratch(wsize + 64 + kGuard, 0xcd);
  const auto misalign = reinterpret_cast<uintptr_t>(scratch.data()) % 64;
  uint8_t* wdata = scratch.data() + (misalign ? 64 - misalign : 0);
  cpu::Barrier barrier(nth);
  std::vector<std::atomic<int64_t>> chunks(static_cast<size_t>(nth));
  const auto body = [&](int ith) {
    cpu::ComputeParams p;
    p.ith = ith;
    p.nth = nth;
    p.wdata = wdata;
    p.wsize = wsize;
    p.barrier = &barrier;
    p.kernels = &table;
    p.next_chunk = chunks.data();
    entry.kernel(p, dst);
  };
  std::vector<std::thread> threads;
  for (int ith = 1; ith < nth; ++ith) threads.emplace_back(body, ith);
  body(0);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < kGuard; ++i)
    ASSERT_EQ(wdata[wsize + i], 0xcd) << "scratch written " << i << " bytes past its end";
}

// b's row as the weight kernel reads it: quantized by the table into the
// vec-dot type of `weights` and decoded back (unchanged for f32).
std::vector<double> as_kernel_reads(const cpu::KernelTable& table, DType weights, const float* x, int64_t K) {
  const DType vtype = cpu::vec_dot_type(weights);
  std::vector<float> back(x, x + K);
  if (vtype != DType::f32) {
    std::vector<uint8_t> q(row_bytes(vtype, K));
    cpu::quantize_activations(table, vtype, x, q.data(), K);
    traits(vtype).to_float(q.data(), back.data(), K);
  }
  return {back.begin(), back.end()};
}

struct Expected {
  std::vector<double> value;
  std::vector<double> tolerance;
};

// mul_mat_id by its definition (op.h), over the values the kernel multiplies.
// a: the experts [K, M, E] decoded; b: [K, n_b, T]; ids [k, T].
Expected expected_mul_mat_id(const cpu::KernelTable& table, DType weights, const std::vector<float>& a, int64_t K,
                             int64_t M, int64_t E, const std::vector<float>& b, int64_t n_b,
                             const std::vector<int32_t>& ids, int64_t k, int64_t T) {
  Expected e;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int32_t id = ids[static_cast<size_t>(s + k * t)];
      const bool chosen = id >= 0 && id < E;
      const float* brow = b.data() + ((n_b == 1 ? 0 : s) + n_b * t) * K;
      const std::vector<double> x = chosen ? as_kernel_reads(table, weights, brow, K) : std::vector<double>();
      for (int64_t m = 0; m < M; ++m) {
        double sum = 0, mag = 0;
        if (chosen) {
          const float* w = a.data() + (m + M * id) * K;
          for (int64_t i = 0; i < K; ++i) {
            sum += w[i] * x[i];
            mag += std::fabs(w[i] * x[i]);
          }
        }
        e.value.push_back(sum);
        e.tolerance.push_back(chosen ? 2e-5 * mag + 1e-30 : 0.0);  // an unchosen row: exactly 0
      }
    }
  }
  return e;
}

struct MoeCase {
  DType type;
  int64_t K, M, E, k, T, n_b;
  std::vector<int32_t> ids;  // [k, T]
  uint32_t seed;

  std::string describe() const {
    return std::string(name_of(type)) + " K=" + std::to_string(K) + " M=" + std::to_string(M) +
           " E=" + std::to_string(E) + " k=" + std::to_string(k) + " T=" + std::to_string(T) +
           " n_b=" + std::to_string(n_b);
  }
};

// Runs the case's node with the table on 1, 2 and 3 threads, each against
// the straight loop and bit for bit the same: a server with other threads
// than the client must choose the same experts downstream.
void check_mul_mat_id(const cpu::KernelTable& table, const MoeCase& c) {
  SCOPED_TRACE(c.describe());
  ASSERT_EQ(c.ids.size(), static_cast<size_t>(c.k * c.T));
  Context ctx;
  Tensor* a = ctx.new_tensor(c.type, {c.K, c.M, c.E}, "experts");
  Tensor* b = ctx.new_tensor(DType::f32, {c.K, c.n_b, c.T}, "b");
  Tensor* ids = ctx.new_tensor(DType::i32, {c.k, c.T}, "ids");
  Tensor* dst = ctx.mul_mat_id(a, b, ids);
  ASSERT_EQ(shape_of(dst), (Shape{c.M, c.k, c.T, 1}));
  HostBytes bytes;
  const std::vector<uint8_t> a_bytes = random_encoded(c.type, a->nelements(), c.seed);
  std::memcpy(bytes.place(a, 0), a_bytes.data(), a_bytes.size());
  const std::vector<float> b_values = random_floats(b->nelements(), c.seed + 1);
  std::memcpy(bytes.place(b, 0), b_values.data(), b->nbytes());
  std::memcpy(bytes.place(ids, 0), c.ids.data(), ids->nbytes());
  Tensor guarded = *dst;  // dst and 64 bytes more, which must stay as they were
  guarded.ne[0] += 16;
  bytes.place(&guarded, 0xff);
  dst->data = guarded.data;  // NaNs: a row the kernel leaves unwritten shows

  const Expected want = expected_mul_mat_id(table, c.type, decode(c.type, a_bytes.data(), a->nelements()), c.K, c.M,
                                            c.E, b_values, c.n_b, c.ids, c.k, c.T);
  std::vector<float> first;
  for (int nth : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(nth) + " threads");
    std::memset(dst->data, 0xff, dst->nbytes() + 64);
    run_kernel(table, *dst, nth);
    if (::testing::Test::HasFatalFailure()) return;
    const auto* past = static_cast<const uint8_t*>(dst->data) + dst->nbytes();
    ASSERT_TRUE(std::all_of(past, past + 64, [](uint8_t v) { return v == 0xff; })) << "written past dst";
    std::vector<float> got(static_cast<size_t>(dst->nelements()));
    std::memcpy(got.data(), dst->data, dst->nbytes());
    ASSERT_TRUE(all_near_each(got, want.value, want.tolerance));
    if (first.empty()) first = got;
    ASSERT_EQ(std::memcmp(got.data(), first.data(), first.size() * sizeof(float)), 0);
  }
}

class MulMatIdTable : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = table_named(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << GetParam() << " kernels are not available on this CPU";
  }
  const cpu::KernelTable& table() const { return *table_; }

 private:
  const cpu::KernelTable* table_ = nullptr;
};
INSTANTIATE_TEST_SUITE_P(Cpu, MulMatIdTable, ::testing::Values("portable", "avx2", "avx512"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Random ids in [0, E) (a slot may repeat another's: ids are data), for
// every weight type: one expert and seven, k from 1 to 4, 1, 3 and 33 tokens
// (decode, a few tokens, prefill), b with one row per token and one per slot.
TEST_P(MulMatIdTable, EveryWeightTypeMatchesAStraightLoop) {
  uint32_t seed = 1;
  for (DType type : weight_types()) {
    for (int64_t E : {1, 7})
      for (int64_t k = 1; k <= 4; ++k)
        for (int64_t T : {1, 3, 33})
          for (int64_t n_b : {int64_t{1}, k}) {
            if (n_b == k && k == 1) continue;  // the same case twice
            const auto ids = random_ints(k * T, seed, 0, static_cast<int32_t>(E - 1));
            check_mul_mat_id(table(), {type, test_k(type), 17, E, k, T, n_b, ids, seed++});
            if (HasFatalFailure()) return;
          }
  }
}

// One type of each vec-dot type (f32, q8_0, q8_K activations) for the cases
// that take the kernel's other paths.
const std::vector<DType> kOnePerActivationType = {DType::f32, DType::q8_0, DType::q4_K};

// mul_mat, which shares mul_mat_id's blocking: against several activation
// rows too, the same bits on 1, 2 and 3 threads (mul_mat_common.h, kRowAlign).
TEST_P(MulMatIdTable, MulMatGivesTheSameBitsOnAnyThreadCount) {
  for (DType type : weight_types()) {
    for (int64_t M : {17, 300, 1000}) {
      for (int64_t N : {1, 3, 9, 40}) {
        SCOPED_TRACE(std::string(name_of(type)) + " M=" + std::to_string(M) + " N=" + std::to_string(N));
        const int64_t K = test_k(type);
        Context ctx;
        Tensor* a = ctx.new_tensor(type, {K, M});
        Tensor* b = ctx.new_tensor(DType::f32, {K, N});
        Tensor* dst = ctx.mul_mat(a, b);
        HostBytes bytes;
        const std::vector<uint8_t> a_bytes = random_encoded(type, a->nelements(), 3);
        std::memcpy(bytes.place(a, 0), a_bytes.data(), a_bytes.size());
        const std::vector<float> b_values = random_floats(b->nelements(), 4);
        std::memcpy(bytes.place(b, 0), b_values.data(), b->nbytes());
        bytes.place(dst, 0);
        std::vector<float> first;
        for (int nth : {1, 2, 3}) {
          run_kernel(table(), *dst, nth);
          if (::testing::Test::HasFatalFailure()) return;
          std::vector<float> got(static_cast<size_t>(dst->nelements()));
          std::memcpy(got.data(), dst->data, dst->nbytes());
          if (first.empty()) first = got;
          ASSERT_EQ(std::memcmp(got.data(), first.data(), first.size() * sizeof(float)), 0) << nth << " threads";
        }
      }
    }
  }
}

TEST_P(MulMatIdTable, EveryTokenPickingTheSameExperts) {
  uint32_t seed = 500;
  for (DType type : kOnePerActivationType) {
    for (int64_t T : {1, 3, 33, 300}) {  // 300: more pairs of one expert than one gemm block takes
      std::vector<int32_t> same(static_cast<size_t>(T), 5);
      check_mul_mat_id(table(), {type, test_k(type), 17, 7, 1, T, 1, same, seed++});
      std::vector<int32_t> two;  // slot 0 expert 6, slot 1 expert 2, every token
      for (int64_t t = 0; t < T; ++t) two.insert(two.end(), {6, 2});
      check_mul_mat_id(table(), {type, test_k(type), 17, 7, 2, T, 2, two, seed++});
      std::vector<int32_t> both(static_cast<size_t>(2 * T), 3);  // both slots one expert
      check_mul_mat_id(table(), {type, test_k(type), 17, 7, 2, T, 1, both, seed++});
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(MulMatIdTable, EveryPairPickingADifferentExpert) {
  uint32_t seed = 600;
  for (DType type : kOnePerActivationType) {
    for (auto [k, T] : {std::pair<int64_t, int64_t>{4, 1}, {2, 3}, {4, 33}}) {
      std::vector<int32_t> ids(static_cast<size_t>(k * T));
      std::iota(ids.begin(), ids.end(), 0);
      std::reverse(ids.begin(), ids.end());
      check_mul_mat_id(table(), {type, test_k(type), 17, k * T, k, T, k, ids, seed++});
      if (HasFatalFailure()) return;
    }
  }
}

// ids come from the network: an id outside [0, E) reads nothing and gives
// that row zeros; the other rows are computed as usual.
TEST_P(MulMatIdTable, AnIdOutsideTheExpertsGivesARowOfZeros) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  uint32_t seed = 700;
  for (DType type : kOnePerActivationType) {
    check_mul_mat_id(table(), {type, test_k(type), 17, 7, 4, 1, 1, {2, -1, 7, 5}, seed++});
    check_mul_mat_id(table(), {type, test_k(type), 17, 7, 2, 3, 2, {kMin, 0, 6, kMax, 7, 7}, seed++});
    check_mul_mat_id(table(), {type, test_k(type), 17, 7, 2, 2, 1, {-1, 7, kMax, kMin}, seed++});  // none chosen
    std::vector<int32_t> ids = random_ints(3 * 33, seed, -3, 9);  // about a third outside
    check_mul_mat_id(table(), {type, test_k(type), 17, 7, 3, 33, 3, ids, seed++});
    if (HasFatalFailure()) return;
  }
}

// More weight rows than one gemm block takes: decode's parts run across
// experts, and several pairs of one expert share blocks of rows; prefill
// deals blocks of rows.
TEST_P(MulMatIdTable, ExpertsOfManyRows) {
  uint32_t seed = 800;
  for (DType type : kOnePerActivationType) {
    check_mul_mat_id(table(), {type, test_k(type), 300, 3, 4, 1, 1, {2, 0, 2, 1}, seed++});
    check_mul_mat_id(table(), {type, test_k(type), 300, 3, 2, 5, 2, random_ints(10, seed, 0, 2), seed++});
    check_mul_mat_id(table(), {type, test_k(type), 300, 3, 2, 40, 1, random_ints(80, seed, 0, 2), seed++});
    // One expert chosen twice, its rows in pieces longer than a block.
    check_mul_mat_id(table(), {type, test_k(type), 2100, 2, 2, 1, 2, {1, 1}, seed++});
    if (HasFatalFailure()) return;
  }
}

// ---- on the device -------------------------------------------------------------------

class MoeOpTest : public CpuOpTest {};
INSTANTIATE_TEST_SUITE_P(Cpu, MoeOpTest, ::testing::ValuesIn(all_cpu_configs()), CpuConfigName());

// The straight loop for a node computed on the device, from the values its
// sources hold (read back from the device).
Expected expected_on(CpuDevice& dev, DType type, const std::vector<float>& a, const Tensor* at,
                     const std::vector<float>& b, const Tensor* bt, const std::vector<int32_t>& ids, const Tensor* it) {
  return expected_mul_mat_id(dev.kernels(), type, a, at->ne[0], at->ne[1], at->ne[2], b, bt->ne[1], ids, it->ne[0],
                             it->ne[1]);
}

// gpt-oss's expert FFN for a batch of tokens, as a model builds it: the
// router's logits, top_k_ids, the gate and up projections of the chosen
// experts (one row of b per token), swiglu_clamp, and the down projection
// (one row of b per slot). Each node is checked against its straight loop
// on what its sources hold.
TEST_P(MoeOpTest, ARoutedExpertFfnMatchesItsStraightLoops) {
  for (int64_t T : {1, 2, 12}) {
    SCOPED_TRACE(std::to_string(T) + " tokens");
    const int64_t E = 8, k = 4, D = 64, F = 256;
    Context ctx;
    Tensor* logits = input(ctx, DType::f32, {E, T}, "router logits");
    Tensor* x = input(ctx, DType::f32, {D, T}, "x");
    Tensor* gate = input(ctx, DType::q4_0, {D, F, E}, "gate");
    Tensor* up = input(ctx, DType::q8_0, {D, F, E}, "up");
    Tensor* down = input(ctx, DType::q4_K, {F, D, E}, "down");
    Tensor* ids = ctx.top_k_ids(logits, static_cast<int>(k));
    Tensor* xb = ctx.reshape(x, {D, 1, T});
    Tensor* g = ctx.mul_mat_id(gate, xb, ids);
    Tensor* u = ctx.mul_mat_id(up, xb, ids);
    Tensor* h = ctx.swiglu_clamp(g, u, 1.702f, 7.0f);  // [F, k, T]
    Tensor* y = ctx.mul_mat_id(down, h, ids);          // [D, k, T]
    GraphRun run(dev(), {ids, g, u, h, y});
    const auto vl = run.write(logits, random_floats(E * T, 11, -3, 3));
    const auto vx = run.write(x, random_floats(D * T, 12, -2, 2));
    const auto vg = run.write_raw(gate, random_encoded(DType::q4_0, gate->nelements(), 13));
    const auto vu = run.write_raw(up, random_encoded(DType::q8_0, up->nelements(), 14));
    const auto vd = run.write_raw(down, random_encoded(DType::q4_K, down->nelements(), 15));
    run.compute();

    const std::vector<int32_t> got_ids = run.read_i32(ids);
    for (int64_t t = 0; t < T; ++t) {  // the router: the k best of each token's logits, best first
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t p, int32_t q) { return vl[t * E + p] > vl[t * E + q]; });
      for (int64_t s = 0; s < k; ++s) EXPECT_EQ(got_ids[t * k + s], order[s]) << "token " << t << " slot " << s;
    }
    const Expected want_g = expected_on(dev(), DType::q4_0, vg, gate, vx, xb, got_ids, ids);
    const Expected want_u = expected_on(dev(), DType::q8_0, vu, up, vx, xb, got_ids, ids);
    const std::vector<float> got_g = run.read(g), got_u = run.read(u);
    EXPECT_TRUE(all_near_each(got_g, want_g.value, want_g.tolerance));
    EXPECT_TRUE(all_near_each(got_u, want_u.value, want_u.tolerance));
    std::vector<double> want_h;
    for (size_t i = 0; i < got_g.size(); ++i) {
      const double gg = std::min<double>(got_g[i], 7.0), uu = std::clamp<double>(got_u[i], -7.0, 7.0);
      want_h.push_back(gg / (1 + std::exp(-1.702 * gg)) * (uu + 1));
    }
    EXPECT_TRUE(all_near(run.read(h), want_h, {1e-5, 1e-6}));
    const Expected want_y = expected_on(dev(), DType::q4_K, vd, down, run.read(h), h, got_ids, ids);
    EXPECT_TRUE(all_near_each(run.read(y), want_y.value, want_y.tolerance));
  }
}

// b's rows strided (a permuted view) and ids a transposed view: both are read
// through their strides.
TEST_P(MoeOpTest, MulMatIdReadsStridedActivationsAndIds) {
  for (int64_t T : {2, 20}) {
    SCOPED_TRACE(std::to_string(T) + " tokens");
    const int64_t K = 64, M = 33, E = 5, k = 3;
    Context ctx;
    Tensor* a = input(ctx, DType::f16, {K, M, E}, "experts");
    Tensor* xs = input(ctx, DType::f32, {K, T, k}, "xs");  // b [K, k, T] is its permutation
    Tensor* b = ctx.permute(xs, 0, 2, 1, 3);
    Tensor* idt = input(ctx, DType::i32, {T, k}, "ids transposed");
    Tensor* ids = ctx.transpose(idt);
    ASSERT_FALSE(ids->is_contiguous());
    Tensor* y = ctx.mul_mat_id(a, b, ids);
    GraphRun run(dev(), {y});
    const auto va = run.write_raw(a, random_encoded(DType::f16, a->nelements(), 21));
    const auto vxs = run.write(xs, random_floats(xs->nelements(), 22));
    const std::vector<int32_t> vidt = random_ints(T * k, 23, 0, static_cast<int32_t>(E - 1));
    run.write_i32(idt, vidt);
    run.compute();
    const HostTensor hb = ref::permute(HostTensor({K, T, k, 1}, vxs), {0, 2, 1, 3});
    std::vector<int32_t> vids(static_cast<size_t>(k * T));  // ids[s, t] = idt[t, s]
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = 0; s < k; ++s) vids[s + k * t] = vidt[t + T * s];
    const Expected want = expected_on(dev(), DType::f16, va, a, {hb.v.begin(), hb.v.end()}, b, vids, ids);
    EXPECT_TRUE(all_near_each(run.read(y), want.value, want.tolerance));
  }
}

// ---- top_k_ids -----------------------------------------------------------------------

// top_k_ids is top_k's index row: the same order, the same ties (the lower
// index first) and NaNs (below -inf), on rows made of few distinct values.
TEST_P(MoeOpTest, TopKIdsIsTopKsIndexRow) {
  const float pool[] = {-1.0f, 0.0f, -0.0f, 1.0f, 2.0f, kNaN, kInf, -kInf};
  for (int64_t n : {5, 300}) {
    for (int k : {1, 4, 5}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", k " + std::to_string(k));
      const Shape ne = {n, 3, 2, 1};
      Context ctx;
      Tensor* a = input(ctx, DType::f32, ne, "a");
      Tensor* ids = ctx.top_k_ids(a, k);
      Tensor* top = ctx.top_k(a, k);
      ASSERT_EQ(ids->type, DType::i32);
      ASSERT_EQ(shape_of(ids), (Shape{k, 3, 2, 1}));
      Tensor* ids_of_view = ctx.top_k_ids(ctx.permute(a, 0, 2, 1, 3), k);  // strided rows of a
      GraphRun run(dev(), {ids, top, ids_of_view});
      std::vector<float> values(static_cast<size_t>(a->nelements()));
      const auto picks = random_ints(a->nelements(), static_cast<uint32_t>(31 + n + k), 0, 7);
      for (size_t i = 0; i < values.size(); ++i) values[i] = pool[picks[i]];
      values[n - 1] = 2.0f;  // row 0: 2 at its end ties with the 2s before it
      run.write(a, values);
      run.compute();
      const std::vector<int32_t> got = run.read_i32(ids), got_view = run.read_i32(ids_of_view);
      const std::vector<float> candidates = run.read(top);
      for (int64_t r = 0; r < 6; ++r) {
        for (int j = 0; j < k; ++j) {
          EXPECT_EQ(static_cast<float>(got[r * k + j]), candidates[r * 2 * k + k + j]) << "row " << r << " " << j;
          // The permuted view's row (i1, i2) is a's row (i2, i1).
          const int64_t i1 = r % 3, i2 = r / 3;
          EXPECT_EQ(got_view[(i2 + 2 * i1) * k + j], got[r * k + j]) << "row " << r << " " << j;
        }
      }
    }
  }
}

TEST_P(MoeOpTest, TopKIdsRanksRowsOfFourDims) {
  const Shape ne = {40, 2, 3, 2};
  const int k = 6;
  Context ctx;
  Tensor* a = input(ctx, DType::f32, ne, "a");
  Tensor* ids = ctx.top_k_ids(a, k);
  ASSERT_EQ(shape_of(ids), (Shape{k, 2, 3, 2}));
  GraphRun run(dev(), {ids});
  auto values = random_floats(a->nelements(), 41, -2, 2);
  values[7] = values[30] = 5.0f;  // a tie in row 0
  values[40 + 3] = kNaN;
  run.write(a, values);
  run.compute();
  const std::vector<int32_t> got = run.read_i32(ids);
  for (int64_t r = 0; r < a->nrows(); ++r) {
    std::vector<int32_t> order(40);
    std::iota(order.begin(), order.end(), 0);
    const float* row = values.data() + r * 40;
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
      if (std::isnan(row[x]) != std::isnan(row[y])) return std::isnan(row[y]);
      return !std::isnan(row[x]) && row[x] > row[y];
    });
    for (int j = 0; j < k; ++j) EXPECT_EQ(got[r * k + j], order[j]) << "row " << r << " " << j;
  }
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], 30);
}

// ---- swiglu_clamp ----------------------------------------------------------------------

// The formula of op.h with std::fmin/std::fmax, in double: a NaN gate or up
// counts as limit.
double swiglu_clamp_ref(double a, double b, double alpha, double limit) {
  const double g = std::fmin(a, limit);
  const double u = std::fmax(std::fmin(b, limit), -limit);
  return g / (1 + std::exp(-alpha * g)) * (u + 1);
}

TEST_P(MoeOpTest, SwigluClampFollowsItsFormulaBeyondTheLimits) {
  for (auto [alpha, limit] : {std::pair<float, float>{1.702f, 7.0f}, {0.5f, 0.25f}, {-1.0f, 3.0f}}) {
    SCOPED_TRACE("alpha " + std::to_string(alpha) + ", limit " + std::to_string(limit));
    const Shape ne = {37, 4, 3, 1};
    Context ctx;
    Tensor* a = input(ctx, DType::f32, ne, "a");
    Tensor* b = input(ctx, DType::f32, ne, "b");
    Tensor* y = ctx.swiglu_clamp(a, b, alpha, limit);
    // The strided path: transposed views of both, the result materialised.
    Tensor* yt = ctx.swiglu_clamp(ctx.transpose(a), ctx.transpose(b), alpha, limit);
    GraphRun run(dev(), {y, yt});
    auto va = random_floats(a->nelements(), 51, -3 * limit, 3 * limit);
    auto vb = random_floats(b->nelements(), 52, -3 * limit, 3 * limit);
    va[0] = kNaN;
    vb[1] = kNaN;
    va[2] = kInf;
    vb[3] = kInf;
    vb[4] = -kInf;
    va[5] = -1e30f;
    va[6] = limit;
    vb[6] = -limit;
    va[7] = 1e30f;
    vb[7] = -1e30f;
    va = run.write(a, va);
    vb = run.write(b, vb);
    run.compute();
    std::vector<double> want;
    for (size_t i = 0; i < va.size(); ++i) want.push_back(swiglu_clamp_ref(va[i], vb[i], alpha, limit));
    EXPECT_TRUE(all_near(run.read(y), want, {1e-5, 1e-6}));
    const std::vector<float> got = run.read(y);
    EXPECT_FALSE(std::isnan(got[0]) || std::isnan(got[1])) << "a NaN gate or up counts as limit";
    std::vector<double> want_t(want.size());  // yt [4, 37, 3]: element (i, j, l) is y's (j, i, l)
    for (int64_t l = 0; l < 3; ++l)
      for (int64_t j = 0; j < 37; ++j)
        for (int64_t i = 0; i < 4; ++i) want_t[(l * 37 + j) * 4 + i] = want[(l * 4 + i) * 37 + j];
    EXPECT_TRUE(all_near(run.read(yt), want_t, {1e-5, 1e-6}));
  }
}

// ---- soft_max's sinks -------------------------------------------------------------------

// softmax(x * scale + mask) over the row and the head's sink, the sink's
// share left out; a row with nothing above -inf (sink included) is zeros.
HostTensor soft_max_with_sinks(const HostTensor& x, const HostTensor* mask, const std::vector<float>& sinks,
                               double scale) {
  HostTensor y(x.ne);
  for (int64_t i3 = 0; i3 < x.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < x.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < x.ne[1]; ++i1) {
        std::vector<double> v(static_cast<size_t>(x.ne[0]));
        double mx = sinks[i2];
        for (int64_t i0 = 0; i0 < x.ne[0]; ++i0) {
          v[i0] = x(i0, i1, i2, i3) * scale + (mask ? (*mask)(i0, i1) : 0.0);
          mx = std::max(mx, v[i0]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        double sum = std::exp(sinks[i2] - mx);
        for (auto& e : v) sum += (e = std::exp(e - mx));
        for (int64_t i0 = 0; i0 < x.ne[0]; ++i0) y(i0, i1, i2, i3) = v[i0] / sum;
      }
  return y;
}

TEST_P(MoeOpTest, SoftMaxSinksTakeTheirShareWithAndWithoutAMask) {
  const Shape ne = {37, 5, 4, 2};  // 4 heads (dim 2), one sink each
  // A sink of the row's scale, one far above (it takes nearly everything), one
  // at -inf (plain softmax), one below.
  const std::vector<float> sink_values = {0.5f, 30.0f, -kInf, -2.0f};
  for (bool masked : {false, true}) {
    SCOPED_TRACE(masked ? "with a mask" : "without a mask");
    Context ctx;
    Tensor* x = input(ctx, DType::f32, ne, "x");
    Tensor* sinks = input(ctx, DType::f32, {4}, "sinks");
    Tensor* mask = masked ? input(ctx, DType::f32, {37, 6}, "mask") : nullptr;
    Tensor* y = ctx.soft_max(x, mask, 0.3f, sinks);
    ASSERT_EQ(y->src[1], mask);
    ASSERT_EQ(y->src[2], sinks);
    GraphRun run(dev(), {y});
    const auto vx = run.write(x, random_floats(x->nelements(), 61, -5, 5));
    run.write(sinks, sink_values);
    HostTensor hmask;
    if (masked) {
      hmask = ref::causal_mask(37, 6, 30);
      for (int64_t i0 = 0; i0 < 37; ++i0) hmask(i0, 2) = -std::numeric_limits<double>::infinity();  // row 2: all masked
      run.write(mask, to_float(hmask));
    }
    run.compute();
    const HostTensor want = soft_max_with_sinks(HostTensor(ne, vx), masked ? &hmask : nullptr, sink_values, 0.3);
    const std::vector<float> got = run.read(y);
    EXPECT_TRUE(all_near(got, want.v, {1e-5, 1e-7}));
    // Each row of head 0 sums to less than 1 (the sink's share); head 2's (a
    // sink at -inf) to 1; a fully masked row is zeros.
    const HostTensor hy(ne, got);
    double head0 = 0, head2 = 0;
    for (int64_t i0 = 0; i0 < 37; ++i0) head0 += hy(i0, 0, 0, 1), head2 += hy(i0, 0, 2, 1);
    EXPECT_LT(head0, 0.999);
    EXPECT_NEAR(head2, 1.0, 1e-5);
    if (masked) {
      for (int64_t i2 = 0; i2 < 4; ++i2)
        for (int64_t i0 = 0; i0 < 37; ++i0) EXPECT_EQ(hy(i0, 2, i2, 0), 0.0f) << "head " << i2 << " column " << i0;
    }
  }
}

}  // namespace
}  // namespace tensorpc::test
