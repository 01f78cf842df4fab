// Attention-score kernels: soft_max (softmax(x * scale + mask) per row) and
// diag_mask_inf (the causal mask).
//
// soft_max's optional mask is f32 [ne0, >= ne1]; row i1 of x uses mask row
// i1 for every i2, i3. Entries at -inf get exactly 0, and a row that is all
// -inf gets all zeros instead of 0/0 = NaN: a fully masked row (a padding
// query) must not poison the values it is multiplied with.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

struct RowCoord {
  int64_t i1, i2, i3;
};
inline RowCoord row_coord(const Tensor& t, int64_t r) {
  return {r % t.ne[1], (r / t.ne[1]) % t.ne[2], r / (t.ne[1] * t.ne[2])};
}

// Gathers row `c` of f32 tensor t into buf unless it is dense; returns the row.
const float* load_row(const Tensor& t, const RowCoord& c, std::vector<float>& buf) {
  const char* p = t.row(c.i1, c.i2, c.i3);
  if (t.nb[0] == sizeof(float)) return reinterpret_cast<const float*>(p);
  buf.resize(t.ne[0]);
  for (int64_t i = 0; i < t.ne[0]; ++i) buf[i] = *reinterpret_cast<const float*>(p + i * t.nb[0]);
  return buf.data();
}

// Writes buf to row `c` of f32 tensor t when t's rows are not dense.
void store_row(const Tensor& t, const RowCoord& c, const float* buf) {
  char* p = t.row(c.i1, c.i2, c.i3);
  for (int64_t i = 0; i < t.ne[0]; ++i) *reinterpret_cast<float*>(p + i * t.nb[0]) = buf[i];
}

}  // namespace

void op_soft_max(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor* mask = dst.src[1];
  const float scale = dst.param<float>(0);
  const int64_t ne0 = dst.ne[0];
  if (ne0 == 0 || (mask && mask->nelements() == 0)) return;
  const bool dst_dense = dst.nb[0] == sizeof(float);
  std::vector<float> in_buf, mask_buf, out_buf(dst_dense ? 0 : ne0);

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowCoord c = row_coord(dst, r);
    const float* x = load_row(a, c, in_buf);
    float* y = dst_dense ? reinterpret_cast<float*>(dst.row(c.i1, c.i2, c.i3)) : out_buf.data();

    // y = x * scale + mask, then its maximum.
    if (mask) {
      const float* m = load_row(*mask, {c.i1 % mask->ne[1], 0, 0}, mask_buf);
      for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] * scale + m[i];
    } else {
      for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] * scale;
    }
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < ne0; ++i) max = y[i] > max ? y[i] : max;

    if (max == -std::numeric_limits<float>::infinity()) {
      for (int64_t i = 0; i < ne0; ++i) y[i] = 0.0f;
    } else {
      // exp(-inf - max) is exactly 0, so masked entries need no special case.
      double sum = 0.0;
      for (int64_t i = 0; i < ne0; ++i) {
        y[i] = std::exp(y[i] - max);
        sum += y[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < ne0; ++i) y[i] *= inv;
    }

    if (!dst_dense) store_row(dst, c, y);
  }
}

void op_diag_mask_inf(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const int64_t n_past = dst.param<int32_t>(0);
  const int64_t ne0 = dst.ne[0];
  const bool dst_dense = dst.nb[0] == sizeof(float);
  std::vector<float> in_buf, out_buf(dst_dense ? 0 : ne0);

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowCoord c = row_coord(dst, r);
    const float* x = load_row(a, c, in_buf);
    float* y = dst_dense ? reinterpret_cast<float*>(dst.row(c.i1, c.i2, c.i3)) : out_buf.data();
    // Row i1 keeps columns 0 .. n_past + i1; the rest become -inf.
    int64_t keep = n_past + c.i1 + 1;
    keep = keep < 0 ? 0 : (keep > ne0 ? ne0 : keep);
    for (int64_t i = 0; i < keep; ++i) y[i] = x[i];
    for (int64_t i = keep; i < ne0; ++i) y[i] = -std::numeric_limits<float>::infinity();
    if (!dst_dense) store_row(dst, c, y);
  }
}

}  // namespace tensorpc::cpu
