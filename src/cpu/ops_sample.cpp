// sample: the sampling chain over top_k's candidates (op.h), one thread.
#include <vector>

#include "core/sample_chain.h"
#include "cpu/op_kernels.h"

namespace tensorpc::cpu {

void op_sample(const ComputeParams& params, Tensor& dst) {
  if (params.ith != 0) return;  // a few hundred candidates: not worth splitting
  const Tensor& c = *dst.src[0];
  const Tensor& recent = *dst.src[1];
  const Tensor& draw = *dst.src[2];
  const auto k = static_cast<size_t>(c.ne[0]);
  // Kept per thread: a decode step would otherwise allocate them every token.
  thread_local std::vector<float> top;
  thread_local std::vector<SampleToken> pool;
  thread_local SampleChain chain;
  top.resize(2 * k);
  for (size_t j = 0; j < k; ++j) {
    top[j] = load_f32(c.row(0, 0, 0) + j * c.nb[0]);
    top[k + j] = load_f32(c.row(1, 0, 0) + j * c.nb[0]);
  }
  int32_t token = kSampleBadCandidates;
  bool undecided = false;
  if (SampleChain::pool_from_candidates(top, dst.param<int32_t>(kSampleParamNVocab), pool, undecided).ok()) {
    if (undecided) {
      token = kSampleUndecided;
    } else {
      const auto* ids = reinterpret_cast<const int32_t*>(recent.data);
      const auto* bits = reinterpret_cast<const uint32_t*>(draw.data);
      const uint64_t d = (static_cast<uint64_t>(bits[1]) << 32) | bits[0];
      token = chain.choose(pool, sample_settings_of(dst),
                           std::span<const int32_t>(ids, static_cast<size_t>(recent.ne[0])), d);
    }
  }
  *reinterpret_cast<int32_t*>(dst.data) = token;
}

}  // namespace tensorpc::cpu
