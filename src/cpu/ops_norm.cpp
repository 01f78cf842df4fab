// Row normalisation kernels: rms_norm (x / sqrt(mean(x^2) + eps)) and norm
// ((x - mean) / sqrt(var + eps)), each over rows of ne[0]; eps is param 0.
//
// Sums run in double, spread over kLanes independent accumulators: the lanes
// let the compiler vectorise the reduction without -ffast-math (it may not
// reorder one serial sum), and double keeps rows of many thousand elements
// accurate. norm takes two passes (mean, then squared deviations) because
// E[x^2] - E[x]^2 cancels badly when the mean is large.
#include <cmath>

#include "cpu/op_kernels.h"
#include "cpu/vec_math.h"

namespace tensorpc::cpu {
namespace {

constexpr int kLanes = 8;

// Sum of (x - c)^2, in lanes like sum_f64 (vec_math.h).
double sum_sq_dev(const float* x, int64_t n, float c) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double v = static_cast<double>(x[i + j]) - c;
      acc[j] += v * v;
    }
  }
  double s = 0.0;
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]) - c;
    s += v * v;
  }
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// The two kernels differ only in the centre (0 or the mean) subtracted and
// the statistic taken; `center` says whether to subtract the mean.
void norm_kernel(const ComputeParams& params, Tensor& dst, bool center) {
  const Tensor& a = *dst.src[0];
  const float eps = dst.param<float>(0);
  const int64_t ne0 = dst.ne[0];
  if (ne0 == 0) return;
  for_each_row_f32(params, a, dst, [&](const RowIndex&, const float* x, float* y) {
    const float mean = center ? static_cast<float>(sum_f64(x, ne0) / ne0) : 0.0f;
    const double var = sum_sq_dev(x, ne0, mean) / ne0;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (int64_t i = 0; i < ne0; ++i) y[i] = (x[i] - mean) * inv;
  });
}

}  // namespace

void op_rms_norm(const ComputeParams& p, Tensor& dst) { norm_kernel(p, dst, /*center=*/false); }
void op_norm(const ComputeParams& p, Tensor& dst) { norm_kernel(p, dst, /*center=*/true); }

}  // namespace tensorpc::cpu
