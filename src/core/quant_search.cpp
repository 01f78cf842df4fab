// Scale searches for the block quantizers (see quant_search.h for what each one fits).
//
// The shape of every search: a handful of candidate inverse scales around the obvious one
// (extreme value -> extreme level), nearest codes for each, a least-squares refit of the scale
// (and min) for those codes, the best kept; then Lloyd-style alternation (nearest codes for the
// fitted scale, refit) while the error still falls. Super-blocks repeat this one level up for
// their integer sub-block scales, and finally round every scale to what the format stores and
// requantize the codes with exactly those stored scales.
#include "core/quant_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float16.h"

namespace tensorpc::quant_search {
namespace {

constexpr int kMaxBlock = 256;
constexpr int kRefineRounds = 8;
// Candidates for the integer sub-block scales of super-blocks: the largest scale lands within
// a level of the top one.
constexpr ScaleSearch kSubScaleSearch{0.1, 9};

void make_finite(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = std::isnan(x[i]) ? 0.0f : std::clamp(x[i], -kInputLimit, kInputLimit);
}

// The f16 nearest d, clamped to the largest finite f16 so that a huge block keeps a finite scale.
uint16_t f16_scale(double d) { return fp32_to_fp16(static_cast<float>(std::clamp(d, -65504.0, 65504.0))); }

// Sum w x l and sum w l^2 over the codes nearest x * iscale, which it writes to `code`. With the
// least-squares scale d = xl / l2 the weighted error is sum w x^2 - xl^2 / l2, so a larger
// score() is a better fit.
struct Moments {
  double xl = 0, l2 = 0;
  double score() const { return l2 > 0 ? xl * xl / l2 : -1.0; }
};

Moments assign(const float* x, const float* w, int n, const Levels& levels, double iscale, uint8_t* code) {
  Moments m;
  for (int i = 0; i < n; ++i) {
    code[i] = static_cast<uint8_t>(levels.nearest(iscale * x[i]));
    const double l = levels.value(code[i]), wi = w ? w[i] : 1.0;
    m.xl += wi * x[i] * l;
    m.l2 += wi * l * l;
  }
  return m;
}

// The least-squares d and m of x ≈ d * code + m for fixed codes, and its squared error.
struct AffineFit {
  ScaleMin fit;
  double error;
};

AffineFit fit_codes(const float* x, int n, const uint8_t* code, bool allow_positive_min) {
  double sl = 0, sl2 = 0, sx = 0, sxl = 0;
  for (int i = 0; i < n; ++i) {
    sl += code[i];
    sl2 += code[i] * code[i];
    sx += x[i];
    sxl += x[i] * code[i];
  }
  const double det = n * sl2 - sl * sl;
  double d = det > 0 ? (n * sxl - sx * sl) / det : 0.0;
  double m = det > 0 ? (sl2 * sx - sl * sxl) / det : sx / n;
  if (!allow_positive_min && m > 0) {
    m = 0;
    d = sl2 > 0 ? sxl / sl2 : 0.0;
  }
  if (!allow_positive_min) d = std::max(d, 0.0);  // the K formats' sub-block scales are unsigned
  double error = 0;
  for (int i = 0; i < n; ++i) error += (d * code[i] + m - x[i]) * (d * code[i] + m - x[i]);
  return {{d, m}, error};
}

// Nearest codes of every sub-block for the stored scales; returns the squared error.
double encode_scaled(const float* x, int sub, const Levels& levels, ScaledSuperBlock& out) {
  const float d = fp16_to_fp32(out.d);
  const int zero = levels.nearest(0.0);
  double error = 0;
  for (int i = 0; i < kMaxBlock; ++i) {
    const double step = static_cast<double>(d) * out.scale[i / sub];
    out.code[i] = static_cast<uint8_t>(step != 0 ? levels.nearest(x[i] / step) : zero);
    const double e = step * levels.value(out.code[i]) - x[i];
    error += e * e;
  }
  return error;
}

double encode_affine(const float* x, int sub, int hi, AffineSuperBlock& out) {
  const double d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin);
  double error = 0;
  for (int i = 0; i < kMaxBlock; ++i) {
    const double step = d * out.scale[i / sub], offset = dmin * out.min[i / sub];
    out.code[i] = static_cast<uint8_t>(step != 0 ? nearest_int((x[i] + offset) / step, 0, hi) : 0);
    const double e = step * out.code[i] - offset - x[i];
    error += e * e;
  }
  return error;
}

}  // namespace

double fit_scale(const float* x, const float* w, int n, const Levels& levels, const ScaleSearch& search,
                 uint8_t* code) {
  double max = 0;  // the value of largest magnitude, with its sign
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(max)) max = x[i];
  }
  double best = -1.0, best_iscale = 0;
  uint8_t trial[kMaxBlock];
  if (max != 0) {
    // Both ends: the extreme as the most negative level or as the most positive one.
    for (const int end : {levels.lo, levels.hi}) {
      if (end == 0) continue;
      for (int k = -search.steps; k <= search.steps; ++k) {
        const double iscale = (end + k * search.step) / max;
        const double score = assign(x, w, n, levels, iscale, trial).score();
        if (score > best) {
          best = score;
          best_iscale = iscale;
        }
      }
    }
  }
  if (best <= 0) {
    std::fill(code, code + n, static_cast<uint8_t>(levels.nearest(0.0)));
    return 0;
  }
  const Moments m = assign(x, w, n, levels, best_iscale, code);
  double d = m.xl / m.l2;
  for (int round = 0; round < kRefineRounds; ++round) {
    const Moments t = assign(x, w, n, levels, 1.0 / d, trial);
    if (t.score() <= best) break;
    best = t.score();
    d = t.xl / t.l2;
    std::memcpy(code, trial, static_cast<size_t>(n));
  }
  return d;
}

ScaleMin fit_scale_min(const float* x, int n, int hi, bool allow_positive_min, uint8_t* code) {
  double min = x[0], max = x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min<double>(min, x[i]);
    max = std::max<double>(max, x[i]);
  }
  if (!allow_positive_min) min = std::min(min, 0.0);
  if (max == min) {
    std::fill(code, code + n, uint8_t{0});
    return {0, min};
  }
  // Inverse steps from (hi - 1) to (hi + 1) levels across the range, in tenths of a level.
  AffineFit best{{0, 0}, INFINITY};
  uint8_t trial[kMaxBlock];
  for (int k = -10; k <= 10; ++k) {
    const double iscale = (hi + 0.1 * k) / (max - min);
    for (int i = 0; i < n; ++i) trial[i] = static_cast<uint8_t>(nearest_int(iscale * (x[i] - min), 0, hi));
    const AffineFit f = fit_codes(x, n, trial, allow_positive_min);
    if (f.error < best.error) {
      best = f;
      std::memcpy(code, trial, static_cast<size_t>(n));
    }
  }
  for (int round = 0; round < kRefineRounds && best.fit.d > 0; ++round) {
    for (int i = 0; i < n; ++i) trial[i] = static_cast<uint8_t>(nearest_int((x[i] - best.fit.m) / best.fit.d, 0, hi));
    const AffineFit f = fit_codes(x, n, trial, allow_positive_min);
    if (!(f.error < best.error)) break;
    best = f;
    std::memcpy(code, trial, static_cast<size_t>(n));
  }
  return best.fit;
}

void quantize_scaled_block(const float* x, const Levels& levels, const ScaleSearch& search, ScaledBlock& out) {
  float xs[32];
  make_finite(x, xs, 32);
  out.d = f16_scale(fit_scale(xs, nullptr, 32, levels, search, out.code));
  const double d = fp16_to_fp32(out.d);
  for (int i = 0; i < 32; ++i) out.code[i] = static_cast<uint8_t>(levels.nearest(d != 0 ? xs[i] / d : 0.0));
}

void quantize_affine_block(const float* x, int hi, AffineBlock& out) {
  float xs[32];
  make_finite(x, xs, 32);
  const ScaleMin f = fit_scale_min(xs, 32, hi, /*allow_positive_min=*/true, out.code);
  out.d = f16_scale(f.d);
  out.m = f16_scale(f.m);
  const double d = fp16_to_fp32(out.d), m = fp16_to_fp32(out.m);
  for (int i = 0; i < 32; ++i) out.code[i] = static_cast<uint8_t>(d != 0 ? nearest_int((xs[i] - m) / d, 0, hi) : 0);
}

void quantize_scaled_super_block(const float* x, int sub, const Levels& levels, const ScaleSearch& search,
                                 const Levels& scale_levels, ScaledSuperBlock& out) {
  float xs[kMaxBlock], scale[16] = {}, weight[16] = {};
  make_finite(x, xs, kMaxBlock);
  const int nsub = kMaxBlock / sub;
  for (int j = 0; j < nsub; ++j) {
    scale[j] = static_cast<float>(fit_scale(xs + j * sub, nullptr, sub, levels, search, out.code + j * sub));
    // A sub-block scale off by e moves the block's values by e * level: weigh it by sum level^2.
    double l2 = 0;
    for (int i = j * sub; i < (j + 1) * sub; ++i) l2 += levels.value(out.code[i]) * levels.value(out.code[i]);
    weight[j] = static_cast<float>(l2);
  }
  uint8_t scale_code[16] = {};
  const double d = fit_scale(scale, weight, nsub, scale_levels, kSubScaleSearch, scale_code);
  for (int j = 0; j < nsub; ++j) out.scale[j] = scale_levels.value(scale_code[j]);
  out.d = f16_scale(d);
  double error = encode_scaled(xs, sub, levels, out);
  // Refit d by least squares for the integer scales and codes while that lowers the error.
  for (int round = 0; round < kRefineRounds; ++round) {
    double xa = 0, a2 = 0;
    for (int i = 0; i < kMaxBlock; ++i) {
      const double a = out.scale[i / sub] * levels.value(out.code[i]);
      xa += xs[i] * a;
      a2 += a * a;
    }
    if (a2 == 0) break;
    ScaledSuperBlock trial = out;
    trial.d = f16_scale(xa / a2);
    const double e = encode_scaled(xs, sub, levels, trial);
    if (!(e < error)) break;
    error = e;
    out = trial;
  }
}

void quantize_affine_super_block(const float* x, int sub, int hi, int scale_max, AffineSuperBlock& out) {
  float xs[kMaxBlock], scale[16] = {}, min[16] = {}, weight[16] = {};
  make_finite(x, xs, kMaxBlock);
  const int nsub = kMaxBlock / sub;
  for (int j = 0; j < nsub; ++j) {
    const ScaleMin f = fit_scale_min(xs + j * sub, sub, hi, /*allow_positive_min=*/false, out.code + j * sub);
    scale[j] = static_cast<float>(f.d);
    min[j] = static_cast<float>(-f.m);
    double l2 = 0;
    for (int i = j * sub; i < (j + 1) * sub; ++i) l2 += out.code[i] * out.code[i];
    weight[j] = static_cast<float>(l2);
  }
  const Levels scale_levels = Levels::range(0, scale_max);
  uint8_t scale_code[16] = {}, min_code[16] = {};
  out.d = f16_scale(fit_scale(scale, weight, nsub, scale_levels, kSubScaleSearch, scale_code));
  out.dmin = f16_scale(fit_scale(min, nullptr, nsub, scale_levels, kSubScaleSearch, min_code));
  for (int j = 0; j < nsub; ++j) {
    out.scale[j] = scale_code[j];
    out.min[j] = min_code[j];
  }
  double error = encode_affine(xs, sub, hi, out);
  // Refit d and dmin together by least squares (x ≈ d * a - dmin * b) while that lowers the error.
  for (int round = 0; round < kRefineRounds; ++round) {
    double aa = 0, ab = 0, bb = 0, xa = 0, xb = 0;
    for (int i = 0; i < kMaxBlock; ++i) {
      const double a = out.scale[i / sub] * out.code[i], b = out.min[i / sub];
      aa += a * a;
      ab += a * b;
      bb += b * b;
      xa += xs[i] * a;
      xb += xs[i] * b;
    }
    const double det = aa * bb - ab * ab;
    if (aa == 0) break;
    AffineSuperBlock trial = out;
    if (det > 0) {
      trial.d = f16_scale((xa * bb - xb * ab) / det);
      trial.dmin = f16_scale((xa * ab - xb * aa) / det);
    } else {
      trial.d = f16_scale(xa / aa);  // no mins in play (all zero): only d matters
    }
    const double e = encode_affine(xs, sub, hi, trial);
    if (!(e < error)) break;
    error = e;
    out = trial;
  }
}

}  // namespace tensorpc::quant_search
