// Element-wise binary kernels (add, sub, mul, div) and scale.
//
// dst has a's shape and is f32. b broadcasts over a: each dim of b is 1 or
// equal to a's, and b is indexed with i % b.ne[i]. In dim 0 a short b repeats
// along the row, so a row is processed in runs of b.ne[0] elements; that keeps
// the inner loop a plain loop the compiler vectorises, both for a full-length
// b and for a scalar b (b.ne[0] == 1, the bias-per-row case).
#include <algorithm>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

struct AddOp {
  static float apply(float x, float y) { return x + y; }
};
struct SubOp {
  static float apply(float x, float y) { return x - y; }
};
struct MulOp {
  static float apply(float x, float y) { return x * y; }
};
struct DivOp {
  static float apply(float x, float y) { return x / y; }
};

// No __restrict__: an allocator may place dst over a (in-place), and the
// element-wise loop is still correct then.
template <typename F>
void run_vec(float* d, const float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = F::apply(x[i], y[i]);
}

template <typename F>
void run_scalar(float* d, const float* x, float y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = F::apply(x[i], y);
}

template <typename F>
void binary_kernel(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const Tensor& b = *dst.src[1];
  const int64_t ne0 = dst.ne[0];
  const int64_t bne0 = b.ne[0];
  if (ne0 == 0 || b.nelements() == 0) return;

  const bool dense = a.nb[0] == sizeof(float) && b.nb[0] == sizeof(float) && dst.nb[0] == sizeof(float);
  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [i1, i2, i3] = row_index(dst, r);
    const char* arow = a.row(i1, i2, i3);
    const char* brow = b.row(i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
    char* drow = dst.row(i1, i2, i3);

    if (dense) {
      float* d = reinterpret_cast<float*>(drow);
      const float* x = reinterpret_cast<const float*>(arow);
      const float* y = reinterpret_cast<const float*>(brow);
      if (bne0 == 1) {
        run_scalar<F>(d, x, y[0], ne0);
      } else {
        for (int64_t i0 = 0; i0 < ne0; i0 += bne0) {
          run_vec<F>(d + i0, x + i0, y, std::min(bne0, ne0 - i0));
        }
      }
    } else {
      for (int64_t i0 = 0; i0 < ne0; ++i0) {
        const float x = load_f32(arow + i0 * a.nb[0]);
        const float y = load_f32(brow + (i0 % bne0) * b.nb[0]);
        store_f32(drow + i0 * dst.nb[0], F::apply(x, y));
      }
    }
  }
}

}  // namespace

void op_add(const ComputeParams& p, Tensor& dst) { binary_kernel<AddOp>(p, dst); }
void op_sub(const ComputeParams& p, Tensor& dst) { binary_kernel<SubOp>(p, dst); }
void op_mul(const ComputeParams& p, Tensor& dst) { binary_kernel<MulOp>(p, dst); }
void op_div(const ComputeParams& p, Tensor& dst) { binary_kernel<DivOp>(p, dst); }

void op_scale(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const float s = dst.param<float>(0);
  const int64_t ne0 = dst.ne[0];
  const bool dense = a.nb[0] == sizeof(float) && dst.nb[0] == sizeof(float);
  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const auto [i1, i2, i3] = row_index(dst, r);
    const char* arow = a.row(i1, i2, i3);
    char* drow = dst.row(i1, i2, i3);
    if (dense) {
      run_scalar<MulOp>(reinterpret_cast<float*>(drow), reinterpret_cast<const float*>(arow), s, ne0);
    } else {
      for (int64_t i0 = 0; i0 < ne0; ++i0) {
        store_f32(drow + i0 * dst.nb[0], load_f32(arow + i0 * a.nb[0]) * s);
      }
    }
  }
}

}  // namespace tensorpc::cpu
