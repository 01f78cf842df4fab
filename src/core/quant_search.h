// The scale searches behind the block quantizers of quant_legacy.cpp, quant_k.cpp and
// quant_iq4.cpp. Each format's quantizer calls one of the four block functions below and only
// packs the codes they return into its bytes.
//
// Every search minimises the plain squared error sum (x - value)^2 of the decoded block, since
// that is what a weight format is judged by (no importance matrix). All of them take any float:
// the block is first made finite (NaN -> 0, clamped to ±kInputLimit) and then divided by its
// largest magnitude, so the search itself runs on values in [-1, 1] in single precision, where
// nothing overflows or underflows; its loops have a fixed length (8, 16 or 32 values) and no
// branches, so that the compiler turns them into vector code.
#pragma once

#include <cstdint>

namespace tensorpc::quant_search {

// Larger than any value a format can decode to (at most 65504 * 127 * 32), so clamping to it
// loses nothing.
inline constexpr float kInputLimit = 1e9f;

// The integer levels a code stands for: the consecutive integers lo..hi, or an ascending table
// of at most 16 (iq4's non-linear grid). A code is the index of its level, which is what every
// format stores (q5_0's q = level + 16, q6_K's q = level + 32, iq4's nibble = index into the
// table).
struct Levels {
  static constexpr int kMaxTable = 16;
  int lo = 0, hi = 0;             // the smallest and largest level
  const int8_t* table = nullptr;  // the levels, ascending; nullptr for all integers lo..hi
  int count = 0;                  // the number of levels (and of codes)
  // For a table: the midpoint between levels k and k + 1, and the rise from one to the other;
  // past the last level, midpoints no value exceeds.
  float mid[kMaxTable - 1] = {}, rise[kMaxTable - 1] = {};

  static Levels range(int lo, int hi) { return {lo, hi, nullptr, hi - lo + 1}; }
  static Levels of_table(const int8_t* table, int count);
  int value(int code) const { return table ? table[code] : lo + code; }
  // The code whose level is nearest v (NaN: the code of level 0's neighbourhood, as 0).
  int nearest(float v) const;
};

// Where the candidate inverse scales of a symmetric search lie: the block's signed extreme is
// mapped to each non-zero end level e (only the one of larger magnitude when !both_ends),
// shifted by k * step for k in -steps..steps.
struct ScaleSearch {
  float step;
  int steps;
  bool both_ends = true;
  int refine = 8;  // at most this many rounds of alternation
};

// x ≈ d * levels.value(code[i]) with the weights w (nullptr: all 1), n = 8, 16 or 32. Tries
// every candidate of `search`, refits d by least squares for the best, then alternates nearest
// codes and refits while the error falls. Returns d, 0 for a block of zeros (or of values
// below 1e-30; the codes then name the level nearest 0).
float fit_scale(const float* x, const float* w, int n, const Levels& levels, const ScaleSearch& search, uint8_t* code);

// x ≈ d * code[i] + m, code in 0..hi, n = 16 or 32: tries the inverse steps (hi + k * step) /
// (max - min) for k in -steps..steps, fitting d and m by least squares for each, then
// alternates as fit_scale. With allow_positive_min false, m <= 0 (the K formats store -m as an
// unsigned min).
struct ScaleMin {
  float d, m;
};
struct MinSearch {
  float step;
  int steps;
  int refine = 8;  // at most this many rounds of alternation
};
ScaleMin fit_scale_min(const float* x, int n, int hi, bool allow_positive_min, const MinSearch& search, uint8_t* code);

// ---- whole blocks, scales rounded to f16 and codes requantized with the rounded scales ----

// A block of 32 as fp16(d) * levels.value(code[i]) (q5_0, iq4_nl).
struct ScaledBlock {
  uint16_t d;
  uint8_t code[32];
};
void quantize_scaled_block(const float* x, const Levels& levels, const ScaleSearch& search, ScaledBlock& out);

// A block of 32 as fp16(d) * code[i] + fp16(m), code in 0..hi (q4_1, q5_1).
struct AffineBlock {
  uint16_t d, m;
  uint8_t code[32];
};
void quantize_affine_block(const float* x, int hi, const MinSearch& search, AffineBlock& out);

// A super-block of 256 in sub-blocks of `sub` (16 or 32) values: fp16(d) * scale[j] *
// levels.value(code[i]) with the integer sub-block scales in `scale_levels` (q3_K, q6_K,
// iq4_xs). The sub-block scales found by fit_scale are themselves fitted by fit_scale, weighted
// by how much each one multiplies (the sum of its squared levels); then d is refitted while the
// error falls.
struct ScaledSuperBlock {
  uint16_t d;
  int scale[16];
  uint8_t code[256];
};
void quantize_scaled_super_block(const float* x, int sub, const Levels& levels, const ScaleSearch& search,
                                 const Levels& scale_levels, ScaledSuperBlock& out);

// A super-block of 256 in sub-blocks of `sub` (16 or 32) values: fp16(d) * scale[j] * code[i]
// - fp16(dmin) * min[j], code in 0..hi, scale and min in 0..scale_max (q2_K, q4_K, q5_K).
struct AffineSuperBlock {
  uint16_t d, dmin;
  int scale[16], min[16];
  uint8_t code[256];
};
void quantize_affine_super_block(const float* x, int sub, int hi, int scale_max, const MinSearch& search,
                                 AffineSuperBlock& out);

}  // namespace tensorpc::quant_search
