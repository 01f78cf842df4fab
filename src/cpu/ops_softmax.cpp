// Attention-score kernels: soft_max (softmax(x * scale + mask) per row) and
// diag_mask_inf (the causal mask).
//
// soft_max's optional mask is f32 [ne0, >= ne1]; row i1 of x uses mask row
// i1 for every i2, i3. Entries at -inf get exactly 0, and a row that is all
// -inf gets all zeros instead of 0/0 = NaN: a fully masked row (a padding
// query) must not poison the values it is multiplied with.
//
// The optional sinks (src[2], f32 [ne2]: gpt-oss's attention sinks) give
// each row of head i2 one more logit, sinks[i2], that joins the row's
// maximum and its sum of exponentials but has no column: the row's values
// then add up to less than 1, the sink taking the rest. A fully masked row
// with a finite sink is all zeros (the sink takes everything). A NaN sink
// makes its head's rows NaN, but for fully masked ones (zeros, as without a
// sink).
#include <limits>
#include <vector>

#include "cpu/op_kernels.h"
#include "cpu/vec_math.h"

namespace tensorpc::cpu {

void op_soft_max(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor* mask = dst.src[1];
  const Tensor* sinks = dst.src[2];
  const float scale = dst.param<float>(0);
  const int64_t ne0 = dst.ne[0];
  if (ne0 == 0 || (mask && mask->nelements() == 0)) return;
  std::vector<float> mask_buf;

  for_each_row_f32(params, a, dst, [&](const RowIndex& c, const float* x, float* y) {
    // y = x * scale + mask, then its maximum.
    if (mask) {
      const float* m = load_row_f32(*mask, {c.i1 % mask->ne[1], 0, 0}, mask_buf);
      for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] * scale + m[i];
    } else {
      for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] * scale;
    }
    float max = max_f32(y, ne0);
    const float sink = sinks ? load_f32(sinks->at(c.i2)) : -std::numeric_limits<float>::infinity();
    max = sink > max ? sink : max;

    if (max == -std::numeric_limits<float>::infinity()) {
      for (int64_t i = 0; i < ne0; ++i) y[i] = 0.0f;
      return;
    }
    // e^(-inf - max) is exactly 0, so masked entries (and no sink) need no special case.
    for (int64_t i = 0; i < ne0; ++i) y[i] = vec_exp(y[i] - max);
    const float inv = static_cast<float>(1.0 / (sum_f64(y, ne0) + vec_exp(sink - max)));
    for (int64_t i = 0; i < ne0; ++i) y[i] *= inv;
  });
}

void op_diag_mask_inf(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const int64_t n_past = dst.param<int32_t>(0);
  const int64_t ne0 = dst.ne[0];
  for_each_row_f32(params, a, dst, [&](const RowIndex& c, const float* x, float* y) {
    // Row i1 keeps columns 0 .. n_past + i1; the rest become -inf.
    int64_t keep = n_past + c.i1 + 1;
    keep = keep < 0 ? 0 : (keep > ne0 ? ne0 : keep);
    for (int64_t i = 0; i < keep; ++i) y[i] = x[i];
    for (int64_t i = keep; i < ne0; ++i) y[i] = -std::numeric_limits<float>::infinity();
  });
}

}  // namespace tensorpc::cpu
