// The gemm_mxfp4 entry of every kernel table this machine can run, against a straight loop over
// the format as the test decodes it (test_util.h: E2M1 code x 2^(e - 127)) and the q8_0
// activations the table itself quantized, in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.h"
#include "test_util.h"

namespace tensorpc::test {
namespace {

const cpu::KernelTable* table_named(const std::string& name) {
  if (name == "portable") return &cpu::portable_kernels();
  if (name == "avx2") return cpu::avx2_kernels();
  return cpu::avx512_kernels();
}

// Sums over up to 128 blocks in float: 2e-5 of sum |a||b| leaves room for their order and still
// catches a wrong code, nibble or exponent (errors of 1e-3 and more).
constexpr double kRelTol = 2e-5;

// A [M x K] mxfp4 weights with rows `lda` bytes apart, starting one byte past an aligned address
// (17-byte blocks need no alignment), bytes between rows 0xff; B the table's q8_0 of xs.
struct Mxfp4Gemm {
  int64_t K, M, N;
  size_t lda, ldb, ldc;
  std::vector<uint8_t> A_storage, B_storage;
  uint8_t *A, *B;
  std::vector<float> C;

  Mxfp4Gemm(int64_t k, int64_t m, int64_t n, uint32_t seed) : K(k), M(m), N(n) {
    std::mt19937 rng(seed);
    const size_t a_row = K / kQBlock * kMXFP4Bytes;
    lda = a_row + 7;
    ldb = K / kQBlock * kQ8Bytes + 6;
    ldc = M + 3;
    A_storage.assign(lda * M + 64, 0xff);
    A = A_storage.data() + 1;
    std::uniform_int_distribution<int> byte(0, 255), e(112, 140);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t b = 0; b < K / kQBlock; ++b) {
        uint8_t* block = A + i * lda + b * kMXFP4Bytes;
        block[0] = static_cast<uint8_t>(e(rng));
        for (int j = 1; j < 17; ++j) block[j] = static_cast<uint8_t>(byte(rng));
      }
    B_storage.assign(ldb * N + 64, 0xff);
    B = B_storage.data() + 2;
    C.assign(ldc * N, -12345.0f);
  }

  void set_activations(const cpu::KernelTable& t, const std::vector<float>& xs) {
    for (int64_t j = 0; j < N; ++j) t.quantize_row_q8_0(xs.data() + j * K, B + j * ldb, K);
  }

  void run_and_check(const cpu::KernelTable& t) {
    const cpu::GemmFn fn = cpu::gemm_for(t, DType::mxfp4);
    ASSERT_NE(fn, nullptr);
    ASSERT_EQ(cpu::vec_dot_type(DType::mxfp4), DType::q8_0);
    fn(K, M, N, A, lda, B, ldb, C.data(), ldc);
    for (int64_t j = 0; j < N; ++j) {
      const std::vector<float> x = decode(DType::q8_0, B + j * ldb, K);
      for (int64_t i = 0; i < M; ++i) {
        double sum = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double w = mxfp4_value(A + i * lda + k / kQBlock * kMXFP4Bytes, static_cast<int>(k % kQBlock));
          sum += w * x[k];
          mag += std::fabs(w * x[k]);
        }
        ASSERT_NEAR(C[j * ldc + i], sum, kRelTol * mag + 1e-30) << "i=" << i << " j=" << j;
      }
      for (size_t i = M; i < ldc; ++i) ASSERT_EQ(C[j * ldc + i], -12345.0f) << "C padding written, j=" << j;
    }
  }
};

class Mxfp4KernelTable : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    table_ = table_named(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << GetParam() << " kernels are not available on this CPU";
  }
  const cpu::KernelTable* table_ = nullptr;
};

TEST_P(Mxfp4KernelTable, GemmMatchesAStraightLoopOverTheFormat) {
  uint32_t seed = 1;
  // K: one block, two, nine (a full group of eight and one over), 128.
  for (int64_t K : {32, 64, 288, 4096})
    for (int64_t M : {1, 3, 7, 33})
      for (int64_t N : {1, 2, 5, 7, 64}) {
        SCOPED_TRACE("K=" + std::to_string(K) + " M=" + std::to_string(M) + " N=" + std::to_string(N));
        Mxfp4Gemm g(K, M, N, seed);
        std::mt19937 rng(seed++ + 1000);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> xs(N * K);
        for (float& v : xs) v = normal(rng);
        g.set_activations(*table_, xs);
        g.run_and_check(*table_);
        if (HasFatalFailure()) return;
      }
}

TEST_P(Mxfp4KernelTable, ExtremeActivationsAgainstEveryCodeDoNotOverflow) {
  // Quants of +-127 in three sign patterns against random codes (every level occurs).
  const int64_t K = 4096;
  Mxfp4Gemm g(K, 9, 3, 77);
  std::vector<float> xs(3 * K);
  for (int64_t k = 0; k < K; ++k) {
    xs[k] = 1.0f;
    xs[K + k] = -1.0f;
    xs[2 * K + k] = (k / 2) % 2 == 0 ? 1.0f : -1.0f;
  }
  g.set_activations(*table_, xs);
  g.run_and_check(*table_);
}

INSTANTIATE_TEST_SUITE_P(KernelMxfp4, Mxfp4KernelTable, ::testing::Values("portable", "avx2", "avx512"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tensorpc::test
