// Row normalisation kernels: rms_norm (x / sqrt(mean(x^2) + eps)) and norm
// ((x - mean) / sqrt(var + eps)), each over rows of ne[0]; eps is param 0.
//
// Sums run in double, spread over kLanes independent accumulators: the lanes
// let the compiler vectorise the reduction without -ffast-math (it may not
// reorder one serial sum), and double keeps rows of many thousand elements
// accurate. norm takes two passes (mean, then squared deviations) because
// E[x^2] - E[x]^2 cancels badly when the mean is large.
#include <cmath>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {
namespace {

constexpr int kLanes = 8;

double sum(const float* x, int64_t n) {
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  }
  double s = 0.0;
  for (; i < n; ++i) s += x[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

// Sum of (x - c)^2.
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
  const bool src_dense = a.nb[0] == sizeof(float);
  const bool dst_dense = dst.nb[0] == sizeof(float);
  std::vector<float> in_buf(src_dense ? 0 : ne0);
  std::vector<float> out_buf(dst_dense ? 0 : ne0);

  const RowRange rows = split_rows(dst.nrows(), params.ith, params.nth);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const int64_t i1 = r % dst.ne[1];
    const int64_t i2 = (r / dst.ne[1]) % dst.ne[2];
    const int64_t i3 = r / (dst.ne[1] * dst.ne[2]);
    const char* arow = a.row(i1, i2, i3);
    const float* x = reinterpret_cast<const float*>(arow);
    if (!src_dense) {
      for (int64_t i = 0; i < ne0; ++i) {
        in_buf[i] = *reinterpret_cast<const float*>(arow + i * a.nb[0]);
      }
      x = in_buf.data();
    }
    float* y = dst_dense ? reinterpret_cast<float*>(dst.row(i1, i2, i3)) : out_buf.data();

    const float mean = center ? static_cast<float>(sum(x, ne0) / ne0) : 0.0f;
    const double var = sum_sq_dev(x, ne0, mean) / ne0;
    const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (int64_t i = 0; i < ne0; ++i) y[i] = (x[i] - mean) * inv;

    if (!dst_dense) {
      char* drow = dst.row(i1, i2, i3);
      for (int64_t i = 0; i < ne0; ++i) {
        *reinterpret_cast<float*>(drow + i * dst.nb[0]) = out_buf[i];
      }
    }
  }
}

}  // namespace

void op_rms_norm(const ComputeParams& p, Tensor& dst) { norm_kernel(p, dst, /*center=*/false); }
void op_norm(const ComputeParams& p, Tensor& dst) { norm_kernel(p, dst, /*center=*/true); }

}  // namespace tensorpc::cpu
