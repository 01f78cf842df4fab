// Computations built on the wire (as docs/protocol.md lays graphs out) for
// the fault and load tests, which drive many sessions at once and need
// results they can check exactly, or work that keeps a device busy.
//
// SmallJob: s = a + b and p = mul_mat(a, s) on 32x8 matrices of small
// integers, so every result is exact in f32 and the expected values are
// computed here by plain loops. HeavyJob: one mul_mat of two NxN matrices,
// for a computation that is still running when a test pulls the plug.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "rpc/rpc_test_util.h"
#include "tensorpc/op.h"
#include "tensorpc/tensor.h"

namespace tensorpc::test {

class SmallJob {
 public:
  static constexpr int64_t K = 32;  // values per row
  static constexpr int64_t M = 8;   // rows
  static constexpr uint64_t kMatrix = K * M * 4;
  // Byte offsets in the job's buffer: a, b, s = a + b, p = mul_mat(a, s).
  static constexpr uint64_t kA = 0, kB = kMatrix, kS = 2 * kMatrix, kP = 3 * kMatrix;
  static constexpr uint64_t kBytes = kP + M * M * 4;

  explicit SmallJob(uint32_t seed) : a_(K * M), b_(K * M) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> v(-4, 4);
    for (float& x : a_) x = static_cast<float>(v(rng));
    for (float& x : b_) x = static_cast<float>(v(rng));
  }

  // The bytes of a and b, to write at kA.
  std::vector<uint8_t> inputs() const {
    std::vector<uint8_t> out(2 * kMatrix);
    std::memcpy(out.data(), a_.data(), kMatrix);
    std::memcpy(out.data() + kMatrix, b_.data(), kMatrix);
    return out;
  }

  // The graph over buffer `handle`.
  std::vector<WireTensor> graph(uint64_t handle) const {
    WireTensor a = WireTensor::f32_matrix(K, M, handle, kA);
    WireTensor b = WireTensor::f32_matrix(K, M, handle, kB);
    WireTensor s = WireTensor::f32_matrix(K, M, handle, kS);
    s.op = static_cast<uint32_t>(Op::add);
    s.src = {0, 1, -1};
    WireTensor p = WireTensor::f32_matrix(M, M, handle, kP);
    p.op = static_cast<uint32_t>(Op::mul_mat);
    p.src = {0, 2, -1};
    p.flags = kFlagOutput;
    return {a, b, s, p};
  }

  // The bytes from kS to the end that a right computation leaves: s, then p.
  std::vector<uint8_t> expected() const {
    std::vector<float> s(K * M), p(M * M);
    for (size_t i = 0; i < s.size(); ++i) s[i] = a_[i] + b_[i];
    for (int64_t n = 0; n < M; ++n)
      for (int64_t m = 0; m < M; ++m) {
        float sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += a_[k + K * m] * s[k + K * n];
        p[m + M * n] = sum;
      }
    std::vector<uint8_t> out(kBytes - kS);
    std::memcpy(out.data(), s.data(), kMatrix);
    std::memcpy(out.data() + kMatrix, p.data(), M * M * 4);
    return out;
  }

 private:
  std::vector<float> a_, b_;
};

// p = mul_mat(a, b) on NxN f32 matrices laid out a, b, p in one buffer:
// 2·N³ multiply-adds, and nothing to check.
struct HeavyJob {
  int64_t n;
  uint64_t bytes() const { return 3 * matrix(); }
  uint64_t matrix() const { return static_cast<uint64_t>(n * n * 4); }
  std::vector<WireTensor> graph(uint64_t handle) const {
    WireTensor a = WireTensor::f32_matrix(n, n, handle, 0);
    WireTensor b = WireTensor::f32_matrix(n, n, handle, matrix());
    WireTensor p = WireTensor::f32_matrix(n, n, handle, 2 * matrix());
    p.op = static_cast<uint32_t>(Op::mul_mat);
    p.src = {0, 1, -1};
    return {a, b, p};
  }
};

}  // namespace tensorpc::test
