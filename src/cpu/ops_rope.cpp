// Rotary position embedding.
//
// x is f32 [D, H, T, 1] (head dim, heads, tokens), positions i32 [T]. The
// first n_dims of each head are rotated in pairs (i in [0, n_dims/2)):
//   normal (mode 0): pair (2i, 2i+1);   neox (mode 2): pair (i, i + n_dims/2)
//   theta = pos * freq_scale * freq_base^(-2i/n_dims)
//   (x0, x1) -> (x0 cos theta - x1 sin theta, x0 sin theta + x1 cos theta)
// and dims >= n_dims pass through. The angles depend only on the token, and a
// thread's rows are ordered head-fastest, so cos/sin are computed once per
// token and reused for its heads. They are computed in double: pos * freq
// reaches tens of thousands of radians, where a float angle has lost digits.
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/op_kernels.h"

namespace tensorpc::cpu {

void op_rope(const ComputeParams& params, Tensor& dst) {
  const Tensor& x = *dst.src[0];
  const Tensor& pos = *dst.src[1];
  const int64_t ne0 = dst.ne[0];
  // Validation happens when the node is built; clamp anyway so a bad param
  // can never index outside the row.
  int64_t n_dims = dst.param<int32_t>(0);
  n_dims = n_dims < 0 ? 0 : (n_dims > ne0 ? ne0 : n_dims);
  n_dims &= ~int64_t{1};
  const bool neox = (dst.param<int32_t>(1) & 2) != 0;
  const double freq_base = dst.param<float>(2);
  const double freq_scale = dst.param<float>(3);
  const int64_t half = n_dims / 2;

  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = freq_scale * std::pow(freq_base, -2.0 * static_cast<double>(i) / n_dims);
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
        const double theta = p * inv_freq[i];
        cos_t[i] = static_cast<float>(std::cos(theta));
        sin_t[i] = static_cast<float>(std::sin(theta));
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
