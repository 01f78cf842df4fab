// The scale searches behind the block quantizers of quant_legacy.cpp, quant_k.cpp and
// quant_iq4.cpp. Each format's quantizer calls one of the four block functions below and only
// packs the codes they return into its bytes.
//
// Every search minimises a squared error sum w (x - value)^2 of the decoded block (no importance
// matrix): w = 1, except in the K formats' scale-and-min fits, where the larger values weigh
// more, since a model's output is most sensitive to their errors (the KL divergence figures in
// docs/performance.md). All of them take any float:
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

// A symmetric search fits x ≈ d * levels.value(code[i]). Its candidate inverse scales map the
// block's signed extreme to each non-zero end level e (only the one of larger magnitude when
// !both_ends), shifted by k * step for k in -steps..steps. It refits d by least squares for the
// best candidate's codes, then alternates nearest codes and refits while the error falls. A block
// of zeros (or of values below 1e-30) gets d = 0 and the codes of the level nearest 0.
struct ScaleSearch {
  float step;
  int steps;
  bool both_ends = true;
  int refine = 8;  // at most this many rounds of alternation
};

// A scale-and-min search fits x ≈ d * code[i] + m, code in 0..hi. It tries the inverse steps
// (hi + k * step) / (max - min) for k in -steps..steps, fitting d and m by least squares for
// each, then alternates as a symmetric search does.
struct MinSearch {
  float step;
  int steps;
  int refine = 8;  // at most this many rounds of alternation
};

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
// iq4_xs). The sub-block scales found by symmetric searches are themselves fitted by one,
// weighted by how much each one multiplies (the sum of its squared levels); then d is refitted
// while the error falls.
struct ScaledSuperBlock {
  uint16_t d;
  int scale[16];
  uint8_t code[256];
};
void quantize_scaled_super_block(const float* x, int sub, const Levels& levels, const ScaleSearch& search,
                                 const Levels& scale_levels, ScaledSuperBlock& out);

// A super-block of 256 in sub-blocks of `sub` (16 or 32) values: fp16(d) * scale[j] * code[i]
// - fp16(dmin) * min[j], code in 0..hi, scale and min in 0..scale_max (q2_K, q4_K, q5_K). The
// sub-blocks' scale-and-min searches weigh each value by the super-block's RMS plus its
// magnitude; the scales and mins are then fitted by symmetric searches, and d and dmin refitted
// together while the error falls.
struct AffineSuperBlock {
  uint16_t d, dmin;
  int scale[16], min[16];
  uint8_t code[256];
};
void quantize_affine_super_block(const float* x, int sub, int hi, int scale_max, const MinSearch& search,
                                 AffineSuperBlock& out);

}  // namespace tensorpc::quant_search
