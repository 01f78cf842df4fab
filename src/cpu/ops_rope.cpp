// Rotary position embedding.
//
// x is f32 [D, H, T, 1] (head dim, heads, tokens), positions i32 [T], and
// optional frequency factors f32 [n_dims/2]. The first n_dims of each head are
// rotated in pairs (i in [0, n_dims/2)):
//   normal (mode 0): pair (2i, 2i+1);   neox (mode 2): pair (i, i + n_dims/2)
//   theta_extrap = pos * freq_base^(-2i/n_dims) / factor_i
//   theta_interp = theta_extrap * freq_scale
//   theta = theta_interp (1 - mix_i) + theta_extrap mix_i, where YaRN's
//     mix_i = ext_factor * (1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1))
//     (0 without YaRN: plain linear scaling)
//   (x0, x1) -> m (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
//     with m = attn_factor, times 1 + 0.1 ln(1/freq_scale) under YaRN
// and dims >= n_dims pass through. theta is pos times a per-pair rate, which
// is computed once per node. The angles depend only on the token, and a
// thread's rows are ordered head-fastest, so cos/sin are computed once per
// token and reused for its heads. They are computed in double: pos * freq
// reaches tens of thousands of radians, where a float angle has lost digits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/op_kernels.h"
#include "tensorpc/context.h"

namespace tensorpc::cpu {

void op_rope(const ComputeParams& params, Tensor& dst) {
  const Tensor& x = *dst.src[0];
  const Tensor& pos = *dst.src[1];
  const Tensor* factors = dst.src[2];
  const int64_t ne0 = dst.ne[0];
  // Validation happens when the node is built; clamp anyway so a bad param
  // can never index outside the row.
  int64_t n_dims = dst.param<int32_t>(kRopeParamNDims);
  n_dims = n_dims < 0 ? 0 : (n_dims > ne0 ? ne0 : n_dims);
  n_dims &= ~int64_t{1};
  const int32_t mode = dst.param<int32_t>(kRopeParamMode);
  const bool neox = (mode & kRopeNeox) != 0;
  const bool yarn = (mode & kRopeYarnBit) != 0;
  const double freq_base = dst.param<float>(kRopeParamFreqBase);
  const double freq_scale = dst.param<float>(kRopeParamFreqScale);
  const double ext_factor = yarn ? dst.param<float>(kRopeParamExtFactor) : 0.0;
  const double corr_low = yarn ? dst.param<float>(kRopeParamCorrLow) : 0.0;
  const double corr_high = yarn ? dst.param<float>(kRopeParamCorrHigh) : 0.0;
  double magnitude = yarn ? dst.param<float>(kRopeParamAttnFactor) : 1.0;
  if (ext_factor != 0.0) magnitude *= 1.0 + 0.1 * std::log(1.0 / freq_scale);
  const int64_t half = n_dims / 2;

  // theta_i = pos * rate[i].
  std::vector<double> rate(half);
  for (int64_t i = 0; i < half; ++i) {
    double extrap = std::pow(freq_base, -2.0 * static_cast<double>(i) / n_dims);
    if (factors != nullptr && i < factors->ne[0]) extrap /= load_f32(factors->at(i));
    double mix = 0.0;
    if (ext_factor != 0.0) {
      const double y = (static_cast<double>(i) - corr_low) / std::max(0.001, corr_high - corr_low);
      mix = ext_factor * (1.0 - std::clamp(y, 0.0, 1.0));
    }
    rate[i] = extrap * (freq_scale * (1.0 - mix) + mix);
  }
  std::vector<float> cos_t(half), sin_t(half);

  int64_t cached_token = -1;
  for_each_row_f32(params, x, dst, [&](const RowIndex& c, const float* in, float* out) {
    const int64_t token = c.i2;
    if (token != cached_token) {
      cached_token = token;
      int32_t p = 0;
      if (token < pos.ne[0]) std::memcpy(&p, pos.at(token), sizeof p);
      for (int64_t i = 0; i < half; ++i) {
        const double theta = p * rate[i];
        cos_t[i] = static_cast<float>(std::cos(theta) * magnitude);
        sin_t[i] = static_cast<float>(std::sin(theta) * magnitude);
      }
    }

    if (neox) {
      const float* a = in;
      const float* b = in + half;
      float* oa = out;
      float* ob = out + half;
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = a[i], x1 = b[i];
        oa[i] = x0 * cos_t[i] - x1 * sin_t[i];
        ob[i] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = in[2 * i], x1 = in[2 * i + 1];
        out[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        out[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
    for (int64_t i = n_dims; i < ne0; ++i) out[i] = in[i];
  });
}

}  // namespace tensorpc::cpu
