// Element-wise activation kernels: silu, gelu (tanh approximation), tanh, sigmoid,
// swiglu (silu(a) * b, a and b of the same shape) and swiglu_clamp
// (gpt-oss's clamped form, op.h). All f32.
//
// Each thread takes a range of dst rows; dense rows go through a plain loop
// (which vectorises: the functions use vec_exp, not std::exp/std::tanh),
// strided rows (views, permutes) through byte strides, computing the same
// values.
#include <bit>
#include <cmath>
#include <cstdint>

#include "cpu/op_kernels.h"
#include "cpu/vec_math.h"

namespace tensorpc::cpu {
namespace {

inline float silu(float x) { return x / (1.0f + vec_exp(-x)); }

// 0.5 x (1 + tanh(y)), y = sqrt(2/pi) (x + 0.044715 x^3), computed as
// x / (1 + e^-2y), the same function (1 + tanh(y) = 2 / (1 + e^-2y)): one
// exp, no cancellation near y = 0, and e^-2y = inf or 0 for large |y| gives
// the limits -0 and x.
inline float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535588f;
  constexpr float kCoef = 0.044715f;
  const float y = kSqrt2OverPi * x * (1.0f + kCoef * x * x);
  return x / (1.0f + vec_exp(-2.0f * y));
}

// tanh within a few ulp, written like vec_exp (selects, no libm) so the loop
// vectorises. For |x| >= 1/4 it is (1 - e) / (1 + e) with e = e^-2|x|, where
// 1 - e >= 0.39 loses no digits; e reaches 0 for large |x|, giving exactly 1.
// Below 1/4 that difference would cancel, so the odd Taylor series to x^9
// (the x^11 term is under 1e-8 relative there) is used instead. The sign is
// x's own, so tanh(-0) = -0 and NaN stays NaN (it fails the comparison and
// goes through vec_exp, which keeps it).
inline float tanh_f32(float x) {
  const uint32_t sign = std::bit_cast<uint32_t>(x) & 0x80000000u;
  const float ax = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0x7fffffffu);
  const float e = vec_exp(-2.0f * ax);
  const float large = (1.0f - e) / (1.0f + e);
  constexpr float c3 = -1.0f / 3, c5 = 2.0f / 15, c7 = -17.0f / 315, c9 = 62.0f / 2835;
  const float a2 = ax * ax;
  const float small = ax + ax * a2 * (c3 + a2 * (c5 + a2 * (c7 + a2 * c9)));
  const float t = ax < 0.25f ? small : large;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(t) | sign);
}

struct SiluOp {
  static float apply(float x) { return silu(x); }
};
struct GeluOp {
  static float apply(float x) { return gelu(x); }
};
struct TanhOp {
  static float apply(float x) { return tanh_f32(x); }
};
// 1 / (1 + e^-x): 0 at -inf, 1 at +inf (e^-x overflows to inf, then 1/inf).
struct SigmoidOp {
  static float apply(float x) { return 1.0f / (1.0f + vec_exp(-x)); }
};

template <typename F>
void unary_kernel(const ComputeParams& params, Tensor& dst) {
  const Tensor& a = *dst.src[0];
  const int64_t ne0 = dst.ne[0];
  const bool dense = a.nb[0] == sizeof(float) && dst.nb[0] == sizeof(float);
  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex c = row_index(dst, r);
    const char* arow = a.row(c.i1, c.i2, c.i3);
    char* drow = dst.row(c.i1, c.i2, c.i3);
    if (dense) {
      const float* x = reinterpret_cast<const float*>(arow);
      float* d = reinterpret_cast<float*>(drow);
      for (int64_t i = 0; i < ne0; ++i) d[i] = F::apply(x[i]);
    } else {
      for (int64_t i = 0; i < ne0; ++i) {
        store_f32(drow + i * dst.nb[0], F::apply(load_f32(arow + i * a.nb[0])));
      }
    }
  }
}

// dst = f(a, b) element by element, a and b of dst's shape.
template <typename F>
void gated_kernel(const ComputeParams& params, Tensor& dst, F f) {
  const Tensor& a = *dst.src[0];
  const Tensor& b = *dst.src[1];
  const int64_t ne0 = dst.ne[0];
  const bool dense = a.nb[0] == sizeof(float) && b.nb[0] == sizeof(float) && dst.nb[0] == sizeof(float);
  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const RowIndex c = row_index(dst, r);
    const char* arow = a.row(c.i1, c.i2, c.i3);
    const char* brow = b.row(c.i1, c.i2, c.i3);
    char* drow = dst.row(c.i1, c.i2, c.i3);
    if (dense) {
      const float* x = reinterpret_cast<const float*>(arow);
      const float* y = reinterpret_cast<const float*>(brow);
      float* d = reinterpret_cast<float*>(drow);
      for (int64_t i = 0; i < ne0; ++i) d[i] = f(x[i], y[i]);
    } else {
      for (int64_t i = 0; i < ne0; ++i) {
        store_f32(drow + i * dst.nb[0], f(load_f32(arow + i * a.nb[0]), load_f32(brow + i * b.nb[0])));
      }
    }
  }
}

}  // namespace

void op_silu(const ComputeParams& p, Tensor& dst) { unary_kernel<SiluOp>(p, dst); }
void op_gelu(const ComputeParams& p, Tensor& dst) { unary_kernel<GeluOp>(p, dst); }
void op_tanh(const ComputeParams& p, Tensor& dst) { unary_kernel<TanhOp>(p, dst); }
void op_sigmoid(const ComputeParams& p, Tensor& dst) { unary_kernel<SigmoidOp>(p, dst); }

void op_swiglu(const ComputeParams& p, Tensor& dst) {
  gated_kernel(p, dst, [](float x, float g) { return silu(x) * g; });
}

// std::fmin and std::fmax return the other operand for a NaN, so a NaN gate
// becomes limit and a NaN up becomes limit as well (never NaN).
void op_swiglu_clamp(const ComputeParams& p, Tensor& dst) {
  const float alpha = dst.param<float>(0);
  const float limit = dst.param<float>(1);
  gated_kernel(p, dst, [alpha, limit](float x, float y) {
    const float g = std::fmin(x, limit);
    const float u = std::fmax(std::fmin(y, limit), -limit);
    return g / (1.0f + vec_exp(-alpha * g)) * (u + 1.0f);
  });
}

}  // namespace tensorpc::cpu
