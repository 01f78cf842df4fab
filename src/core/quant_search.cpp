// Scale searches for the block quantizers (see quant_search.h for what each one fits).
//
// The shape of every search: a handful of candidate inverse scales around the obvious one
// (extreme value -> extreme level), nearest codes for each, a least-squares refit of the scale
// (and min) for those codes, the best kept; then Lloyd-style alternation (nearest codes for the
// fitted scale, refit) while the error still falls. Super-blocks repeat this one level up for
// their integer sub-block scales, and finally round every scale to what the format stores and
// requantize the codes with exactly those stored scales.
//
// Speed: the loops over a block's values have a length fixed at compile time (the templates'
// N) and no branches, and they write their terms to arrays that sum() adds up in eight lanes:
// both become vector code. A search over candidate scales puts the candidates in the lanes.
#include "core/quant_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "core/float16.h"

namespace tensorpc::quant_search {
namespace {

constexpr int kMaxBlock = 256;
// Candidates for the integer sub-block scales of super-blocks: the largest scale lands within
// a level of the top one.
constexpr ScaleSearch kSubScaleSearch{0.1f, 9, true, 8};
// The refits of d (and dmin) of a super-block for its integer scales: at most this many.
constexpr int kRefineRounds = 8;
// Below this a block's largest magnitude counts as zero: every format's f16 scale rounds such a
// block to zero anyway, and 1 / kTiny is still finite.
constexpr float kTiny = 1e-30f;

// v rounded to the nearest integer (ties to even) for |v| < 2^22: adding 1.5 * 2^23 leaves no
// fraction bits. Two additions in any vector width, where std::nearbyint may be a call.
inline float round_small(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// The sum of a[0..N), N a multiple of 8, as eight partial sums (value i in sum i % 8) added
// up at the end. Callers first write the terms to an array in a loop with no sums, which
// becomes vector code; this loop does too, and its order of additions, so its result, does
// not depend on the vector width.
template <int N>
float sum(const float* a) {
  static_assert(N % 8 == 0);
  float lane[8];
  for (int j = 0; j < 8; ++j) lane[j] = a[j];
  for (int b = 8; b < N; b += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += a[b + j];
  }
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

void make_finite(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = std::isnan(x[i]) ? 0.0f : std::clamp(x[i], -kInputLimit, kInputLimit);
}

// The f16 nearest d, clamped to the largest finite f16 so that a huge block keeps a finite scale.
uint16_t f16_scale(float d) { return fp32_to_fp16(std::clamp(d, -65504.0f, 65504.0f)); }

// A Levels as the loops read it: local copies that no store of a code (a uint8_t, which may
// alias anything) forces the compiler to load again.
struct Grid {
  float lo, hi, base;
  float mid[Levels::kMaxTable - 1], rise[Levels::kMaxTable - 1];
};

Grid grid_of(const Levels& levels) {
  Grid g{static_cast<float>(levels.lo), static_cast<float>(levels.hi), static_cast<float>(levels.lo), {}, {}};
  std::copy(std::begin(levels.mid), std::end(levels.mid), g.mid);
  std::copy(std::begin(levels.rise), std::end(levels.rise), g.rise);
  return g;
}

// The level nearest v and its code, without branches: a range rounds and clamps (v may be huge,
// never NaN); a table counts the midpoints below v.
template <bool kTable>
inline float nearest_level(float v, const Grid& g, int& code) {
  if constexpr (kTable) {
    float l = g.base;
    int c = 0;
    for (int k = 0; k < Levels::kMaxTable - 1; ++k) {
      const float mid = g.mid[k], rise = g.rise[k];  // loaded always: no branch around a load
      const bool up = v > mid;
      c += up;
      l += up ? rise : 0.0f;
    }
    code = c;
    return l;
  } else {
    const float lo = g.lo, hi = g.hi;  // values, not references into g: no branch around a load
    const float l = round_small(std::min(std::max(v, lo), hi));
    code = static_cast<int>(l - lo);
    return l;
  }
}

// Sum w y l and sum w l^2 over the codes nearest y * iscale, which it writes to `code`. With
// the least-squares scale d = yl / l2 the weighted error is sum w y^2 - yl^2 / l2, so a larger
// score() is a better fit.
struct Moments {
  float yl = 0, l2 = 0;
  float score() const { return l2 > 0 ? yl * yl / l2 : -1.0f; }
};

template <int N, bool kTable, bool kWeighted>
Moments assign(const float* y, const float* w, float iscale, Grid g, uint8_t* code) {
  float yl[N], l2[N];
  for (int i = 0; i < N; ++i) {
    int c;
    const float l = nearest_level<kTable>(iscale * y[i], g, c);
    code[i] = static_cast<uint8_t>(c);
    const float wi = kWeighted ? w[i] : 1.0f;
    yl[i] = wi * y[i] * l;
    l2[i] = wi * l * l;
  }
  return {sum<N>(yl), sum<N>(l2)};
}

// A symmetric search (ScaleSearch) on a block of N: d, and the sum of the squared levels of its
// codes (when unweighted).
struct Fit {
  float d, l2;
};

// Room for every candidate of a search, in whole vectors.
constexpr int kMaxCandidates = 64;

template <int N, bool kTable, bool kWeighted>
Fit fit(const float* x, const float* w, const Levels& levels, const ScaleSearch& search, uint8_t* code) {
  float lowest = 0, highest = 0;
  for (int i = 0; i < N; ++i) {
    lowest = std::min(lowest, x[i]);
    highest = std::max(highest, x[i]);
  }
  // The largest magnitude, and the sign of the value that has it (+ on a tie).
  const float amax = std::max(highest, -lowest), sign = highest >= -lowest ? 1.0f : -1.0f;
  const auto zeros = [&] {
    const int zero = levels.nearest(0.0f);
    std::fill(code, code + N, static_cast<uint8_t>(zero));
    return Fit{0, static_cast<float>(N) * static_cast<float>(levels.value(zero) * levels.value(zero))};
  };
  if (!(amax >= kTiny)) return zeros();
  // The block divided by its largest magnitude, whose extreme is then exactly ±1.
  float y[N];
  const float inv = 1.0f / amax;
  for (int i = 0; i < N; ++i) y[i] = x[i] * inv;
  const Grid g = grid_of(levels);

  // The candidate inverse scales, one per vector lane: both ends, or the one of larger
  // magnitude (the low one on a tie). The lanes past the last candidate score nothing.
  float iscale[kMaxCandidates];
  int candidates = 0;
  const int wide = std::abs(levels.lo) >= std::abs(levels.hi) ? levels.lo : levels.hi;
  for (const int end : {levels.lo, levels.hi}) {
    if (end == 0 || (!search.both_ends && end != wide)) continue;
    for (int k = -search.steps; k <= search.steps && candidates < kMaxCandidates; ++k) {
      iscale[candidates++] = sign * (static_cast<float>(end) + static_cast<float>(k) * search.step);
    }
  }
  float best_iscale = iscale[0];
  if (candidates > 1) {
    const int lanes = (candidates + 7) / 8 * 8;
    std::fill(iscale + candidates, iscale + lanes, 0.0f);
    float yl[kMaxCandidates], l2[kMaxCandidates];
    std::fill(yl, yl + lanes, 0.0f);
    std::fill(l2, l2 + lanes, 0.0f);
    for (int i = 0; i < N; ++i) {
      const float yi = y[i], wi = kWeighted ? w[i] : 1.0f;
      for (int k = 0; k < lanes; ++k) {
        int c;
        const float l = nearest_level<kTable>(yi * iscale[k], g, c);
        yl[k] += wi * yi * l;
        l2[k] += wi * l * l;
      }
    }
    float score[kMaxCandidates];
    for (int k = 0; k < lanes; ++k) score[k] = Moments{yl[k], l2[k]}.score();
    int pick = 0;
    for (int k = 1; k < candidates; ++k) pick = score[k] > score[pick] ? k : pick;
    best_iscale = iscale[pick];
  }
  Moments m = assign<N, kTable, kWeighted>(y, w, best_iscale, g, code);
  float best = m.score();
  if (best <= 0) return zeros();
  uint8_t trial[N];
  for (int round = 0; round < search.refine; ++round) {
    const Moments t = assign<N, kTable, kWeighted>(y, w, m.l2 / m.yl, g, trial);
    if (!(t.score() > best)) break;
    best = t.score();
    m = t;
    std::memcpy(code, trial, N);
  }
  return {m.yl / m.l2 * amax, kWeighted ? 0.0f : m.l2};
}

// Codes nearest x / step (step 0: the code nearest 0) with the sums the refits of a super-block
// need, and the block's squared error sum (step * level - x)^2.
struct Encoded {
  float error, xl, l2;
};

template <int N, bool kTable>
Encoded encode(const float* x, float step, Grid g, uint8_t* code) {
  const float inv = step != 0 ? 1.0f / step : 0.0f;
  float error[N], xl[N], l2[N];
  for (int i = 0; i < N; ++i) {
    int c;
    const float l = nearest_level<kTable>(x[i] * inv, g, c);
    code[i] = static_cast<uint8_t>(c);
    const float e = step * l - x[i];
    error[i] = e * e;
    xl[i] = x[i] * l;
    l2[i] = l * l;
  }
  return {sum<N>(error), sum<N>(xl), sum<N>(l2)};
}

// ---- scale and min ----

// The least-squares d and m of y ≈ d * c + m for the codes c (as floats), and its squared error.
struct AffineFit {
  float d, m, error;
};

// The least-squares d and m from the weighted sums of 1, c, c^2, y and y c (error not set).
inline AffineFit solve_affine(float sw, float sl, float sl2, float sy, float syl, bool allow_positive_min) {
  // det >= 0 (Cauchy-Schwarz) and 0 when every code is the same; rounding may leave a trace of
  // it, which must not pass for a fit.
  const float det = sw * sl2 - sl * sl;
  const bool solvable = det > 1e-6f * sw * sl2;
  float d = solvable ? (sw * syl - sy * sl) / det : 0.0f;
  float m = solvable ? (sl2 * sy - sl * syl) / det : sy / sw;
  if (!allow_positive_min && m > 0) {
    m = 0;
    d = sl2 > 0 ? syl / sl2 : 0.0f;
  }
  if (!allow_positive_min) d = std::max(d, 0.0f);  // the K formats' sub-block scales are unsigned
  return {d, m, 0};
}

template <int N>
AffineFit fit_codes(const float* y, const float* w, const float* c, bool allow_positive_min) {
  float wc[N], wc2[N], wy[N], wyc[N];
  for (int i = 0; i < N; ++i) {
    wc[i] = w[i] * c[i];
    wc2[i] = wc[i] * c[i];
    wy[i] = w[i] * y[i];
    wyc[i] = wy[i] * c[i];
  }
  const AffineFit f = solve_affine(sum<N>(w), sum<N>(wc), sum<N>(wc2), sum<N>(wy), sum<N>(wyc), allow_positive_min);
  float error[N];
  for (int i = 0; i < N; ++i) error[i] = w[i] * (f.d * c[i] + f.m - y[i]) * (f.d * c[i] + f.m - y[i]);
  return {f.d, f.m, sum<N>(error)};
}

// The codes round((y - origin) * iscale), clamped to 0..hi, as floats.
template <int N>
void affine_codes(const float* y, float origin, float iscale, float hi, float* c) {
  for (int i = 0; i < N; ++i) c[i] = round_small(std::min(std::max((y[i] - origin) * iscale, 0.0f), hi));
}

// Equal weights, for the fits that weigh every value the same.
constexpr float kOnes[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

struct ScaleMin {
  float d, m;
};

struct MinFit {
  ScaleMin fit;
  float l2;  // the sum of the squared codes
};

template <int N>
MinFit fit_min(const float* x, const float* w, int hi, bool allow_positive_min, const MinSearch& search,
               uint8_t* code) {
  float low = x[0], high = x[0];
  for (int i = 1; i < N; ++i) {
    low = std::min(low, x[i]);
    high = std::max(high, x[i]);
  }
  float min = low;
  const float max = high;
  if (!allow_positive_min) min = std::min(min, 0.0f);
  const float amax = std::max(std::fabs(min), std::fabs(max));
  // A constant block, or one too small to measure, is its min.
  if (!(max - min >= kTiny * amax) || !(amax >= kTiny)) {
    std::fill(code, code + N, uint8_t{0});
    return {{0, min}, 0};
  }
  float y[N];
  const float inv = 1.0f / amax;
  for (int i = 0; i < N; ++i) y[i] = x[i] * inv;
  const float ymin = min * inv, yrange = max * inv - ymin, fhi = static_cast<float>(hi);

  // Every candidate step at once, one per vector lane: the code sums, then the least-squares
  // fit of each, then each fit's error.
  float iscale[kMaxCandidates];
  int candidates = 0;
  for (int k = -search.steps; k <= search.steps && candidates < kMaxCandidates; ++k) {
    iscale[candidates++] = (fhi + static_cast<float>(k) * search.step) / yrange;
  }
  AffineFit best;
  float c[N], best_c[N];
  if (candidates == 1) {
    affine_codes<N>(y, ymin, iscale[0], fhi, best_c);
    best = fit_codes<N>(y, w, best_c, allow_positive_min);
  } else {
    const int lanes = (candidates + 7) / 8 * 8;
    std::fill(iscale + candidates, iscale + lanes, iscale[0]);
    float sl[kMaxCandidates], sl2[kMaxCandidates], syl[kMaxCandidates];
    std::fill(sl, sl + lanes, 0.0f);
    std::fill(sl2, sl2 + lanes, 0.0f);
    std::fill(syl, syl + lanes, 0.0f);
    float sw = 0, sy = 0;
    for (int i = 0; i < N; ++i) {
      const float yi = y[i], wi = w[i], from_min = y[i] - ymin;
      sw += wi;
      sy += wi * yi;
      for (int k = 0; k < lanes; ++k) {
        const float ck = round_small(std::min(std::max(from_min * iscale[k], 0.0f), fhi));
        sl[k] += wi * ck;
        sl2[k] += wi * ck * ck;
        syl[k] += wi * yi * ck;
      }
    }
    float d[kMaxCandidates], m[kMaxCandidates], error[kMaxCandidates];
    std::fill(error, error + lanes, 0.0f);
    for (int k = 0; k < lanes; ++k) {
      const AffineFit f = solve_affine(sw, sl[k], sl2[k], sy, syl[k], allow_positive_min);
      d[k] = f.d;
      m[k] = f.m;
    }
    for (int i = 0; i < N; ++i) {
      const float yi = y[i], wi = w[i], from_min = y[i] - ymin;
      for (int k = 0; k < lanes; ++k) {
        const float ck = round_small(std::min(std::max(from_min * iscale[k], 0.0f), fhi));
        const float e = d[k] * ck + m[k] - yi;
        error[k] += wi * e * e;
      }
    }
    int pick = 0;
    for (int k = 1; k < candidates; ++k) pick = error[k] < error[pick] ? k : pick;
    best = {d[pick], m[pick], error[pick]};
    affine_codes<N>(y, ymin, iscale[pick], fhi, best_c);
  }
  for (int round = 0; round < search.refine && best.d > kTiny; ++round) {
    affine_codes<N>(y, best.m, 1.0f / best.d, fhi, c);
    const AffineFit f = fit_codes<N>(y, w, c, allow_positive_min);
    if (!(f.error < best.error)) break;
    best = f;
    std::copy(c, c + N, best_c);
  }
  float l2 = 0;
  for (int i = 0; i < N; ++i) {
    code[i] = static_cast<uint8_t>(best_c[i]);
    l2 += best_c[i] * best_c[i];
  }
  return {{best.d * amax, best.m * amax}, l2};
}

// ---- super-blocks ----

template <int Sub, bool kTable>
float encode_scaled(const float* x, const Grid& g, ScaledSuperBlock& out, float* xa, float* a2) {
  const float d = fp16_to_fp32(out.d);
  float error = 0;
  *xa = *a2 = 0;
  for (int j = 0; j < kMaxBlock / Sub; ++j) {
    const float s = static_cast<float>(out.scale[j]);
    const Encoded e = encode<Sub, kTable>(x + j * Sub, d * s, g, out.code + j * Sub);
    error += e.error;
    *xa += s * e.xl;
    *a2 += s * s * e.l2;
  }
  return error;
}

template <int Sub, bool kTable>
void scaled_super_block(const float* x, const Levels& levels, const ScaleSearch& search, const Levels& scale_levels,
                        ScaledSuperBlock& out) {
  constexpr int kSubs = kMaxBlock / Sub;
  float xs[kMaxBlock], scale[kSubs], weight[kSubs];
  make_finite(x, xs, kMaxBlock);
  for (int j = 0; j < kSubs; ++j) {
    // A sub-block scale off by e moves the block's values by e * level: weigh it by sum level^2.
    const Fit f = fit<Sub, kTable, false>(xs + j * Sub, nullptr, levels, search, out.code + j * Sub);
    scale[j] = f.d;
    weight[j] = f.l2;
  }
  uint8_t scale_code[kSubs] = {};
  const float d = fit<kSubs, false, true>(scale, weight, scale_levels, kSubScaleSearch, scale_code).d;
  for (int j = 0; j < kSubs; ++j) out.scale[j] = scale_levels.value(scale_code[j]);
  out.d = f16_scale(d);
  const Grid g = grid_of(levels);
  float xa, a2;
  float error = encode_scaled<Sub, kTable>(xs, g, out, &xa, &a2);
  // Refit d by least squares for the integer scales and codes while that lowers the error.
  for (int round = 0; round < kRefineRounds && a2 > 0; ++round) {
    ScaledSuperBlock trial = out;
    trial.d = f16_scale(xa / a2);
    float trial_xa, trial_a2;
    const float e = encode_scaled<Sub, kTable>(xs, g, trial, &trial_xa, &trial_a2);
    if (!(e < error)) break;
    error = e;
    out = trial;
    xa = trial_xa;
    a2 = trial_a2;
  }
}

// The sums a least-squares refit of d and dmin needs (x ≈ d * a - dmin * b, a = scale * code,
// b = min), and the squared error.
struct AffineSums {
  float error = 0, aa = 0, ab = 0, bb = 0, xa = 0, xb = 0;
};

template <int Sub>
AffineSums encode_affine(const float* x, int hi, AffineSuperBlock& out) {
  const float d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin), fhi = static_cast<float>(hi);
  AffineSums sums;
  for (int j = 0; j < kMaxBlock / Sub; ++j) {
    const float s = static_cast<float>(out.scale[j]), mn = static_cast<float>(out.min[j]);
    const float step = d * s, offset = dmin * mn, inv = step != 0 ? 1.0f / step : 0.0f;
    const float* xj = x + j * Sub;
    uint8_t* code = out.code + j * Sub;
    float error[Sub], c[Sub], c2[Sub], xc[Sub];
    for (int i = 0; i < Sub; ++i) {
      c[i] = round_small(std::min(std::max((xj[i] + offset) * inv, 0.0f), fhi));
      code[i] = static_cast<uint8_t>(c[i]);
      const float e = step * c[i] - offset - xj[i];
      error[i] = e * e;
      c2[i] = c[i] * c[i];
      xc[i] = xj[i] * c[i];
    }
    sums.error += sum<Sub>(error);
    sums.aa += s * s * sum<Sub>(c2);
    sums.ab += s * mn * sum<Sub>(c);
    sums.bb += mn * mn * static_cast<float>(Sub);
    sums.xa += s * sum<Sub>(xc);
    sums.xb += mn * sum<Sub>(xj);
  }
  return sums;
}

template <int Sub>
void affine_super_block(const float* x, int hi, int scale_max, const MinSearch& search, AffineSuperBlock& out) {
  constexpr int kSubs = kMaxBlock / Sub;
  float xs[kMaxBlock], scale[kSubs], min[kSubs], weight[kSubs];
  make_finite(x, xs, kMaxBlock);
  // Each value's weight in the sub-block fits: the super-block's RMS plus its magnitude, so
  // that the large values, which carry the most of a dot product's error, are fitted closer.
  float weight_of[kMaxBlock], squares[kMaxBlock];
  for (int i = 0; i < kMaxBlock; ++i) squares[i] = xs[i] * xs[i];
  const float rms = std::sqrt(sum<kMaxBlock>(squares) / kMaxBlock);
  for (int i = 0; i < kMaxBlock; ++i) weight_of[i] = rms + std::fabs(xs[i]);
  for (int j = 0; j < kSubs; ++j) {
    const MinFit f =
        fit_min<Sub>(xs + j * Sub, weight_of + j * Sub, hi, /*allow_positive_min=*/false, search, out.code + j * Sub);
    scale[j] = f.fit.d;
    min[j] = -f.fit.m;
    weight[j] = f.l2;
  }
  const Levels scale_levels = Levels::range(0, scale_max);
  uint8_t scale_code[kSubs] = {}, min_code[kSubs] = {};
  out.d = f16_scale(fit<kSubs, false, true>(scale, weight, scale_levels, kSubScaleSearch, scale_code).d);
  out.dmin = f16_scale(fit<kSubs, false, false>(min, nullptr, scale_levels, kSubScaleSearch, min_code).d);
  for (int j = 0; j < kSubs; ++j) {
    out.scale[j] = scale_code[j];
    out.min[j] = min_code[j];
  }
  AffineSums sums = encode_affine<Sub>(xs, hi, out);
  // Refit d and dmin together by least squares while that lowers the error.
  for (int round = 0; round < kRefineRounds && sums.aa > 0; ++round) {
    const float det = sums.aa * sums.bb - sums.ab * sums.ab;
    AffineSuperBlock trial = out;
    if (det > 0) {
      trial.d = f16_scale((sums.xa * sums.bb - sums.xb * sums.ab) / det);
      trial.dmin = f16_scale((sums.xa * sums.ab - sums.xb * sums.aa) / det);
    } else {
      trial.d = f16_scale(sums.xa / sums.aa);  // no mins in play (all zero): only d matters
    }
    const AffineSums t = encode_affine<Sub>(xs, hi, trial);
    if (!(t.error < sums.error)) break;
    sums = t;
    out = trial;
  }
}

}  // namespace

Levels Levels::of_table(const int8_t* table, int count) {
  Levels levels{table[0], table[count - 1], table, count};
  for (int k = 0; k < kMaxTable - 1; ++k) {
    const bool inside = k + 1 < count;
    levels.mid[k] =
        inside ? 0.5f * static_cast<float>(table[k] + table[k + 1]) : std::numeric_limits<float>::infinity();
    levels.rise[k] = inside ? static_cast<float>(table[k + 1] - table[k]) : 0.0f;
  }
  return levels;
}

int Levels::nearest(float v) const {
  if (std::isnan(v)) v = 0;
  int code;
  if (table) {
    nearest_level<true>(v, grid_of(*this), code);
  } else {
    nearest_level<false>(v, grid_of(*this), code);
  }
  return code;
}

void quantize_scaled_block(const float* x, const Levels& levels, const ScaleSearch& search, ScaledBlock& out) {
  float xs[32];
  make_finite(x, xs, 32);
  const Grid g = grid_of(levels);
  if (levels.table) {
    out.d = f16_scale(fit<32, true, false>(xs, nullptr, levels, search, out.code).d);
    encode<32, true>(xs, fp16_to_fp32(out.d), g, out.code);
  } else {
    out.d = f16_scale(fit<32, false, false>(xs, nullptr, levels, search, out.code).d);
    encode<32, false>(xs, fp16_to_fp32(out.d), g, out.code);
  }
}

void quantize_affine_block(const float* x, int hi, const MinSearch& search, AffineBlock& out) {
  float xs[32];
  make_finite(x, xs, 32);
  const ScaleMin f = fit_min<32>(xs, kOnes, hi, /*allow_positive_min=*/true, search, out.code).fit;
  out.d = f16_scale(f.d);
  out.m = f16_scale(f.m);
  const float d = fp16_to_fp32(out.d), m = fp16_to_fp32(out.m);
  float c[32];
  affine_codes<32>(xs, m, d != 0 ? 1.0f / d : 0.0f, static_cast<float>(hi), c);
  for (int i = 0; i < 32; ++i) out.code[i] = static_cast<uint8_t>(c[i]);
}

void quantize_scaled_super_block(const float* x, int sub, const Levels& levels, const ScaleSearch& search,
                                 const Levels& scale_levels, ScaledSuperBlock& out) {
  if (levels.table) {
    sub == 16 ? scaled_super_block<16, true>(x, levels, search, scale_levels, out)
              : scaled_super_block<32, true>(x, levels, search, scale_levels, out);
  } else {
    sub == 16 ? scaled_super_block<16, false>(x, levels, search, scale_levels, out)
              : scaled_super_block<32, false>(x, levels, search, scale_levels, out);
  }
}

void quantize_affine_super_block(const float* x, int sub, int hi, int scale_max, const MinSearch& search,
                                 AffineSuperBlock& out) {
  sub == 16 ? affine_super_block<16>(x, hi, scale_max, search, out)
            : affine_super_block<32>(x, hi, scale_max, search, out);
}

}  // namespace tensorpc::quant_search
