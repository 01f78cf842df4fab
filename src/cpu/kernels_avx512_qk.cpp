// The "avx512" table's K super-block formats (q2_K … q6_K, iq4_xs) against q8_K activations.
//
// Each format is a loader for kernels_avx512_codes.h: one super-block becomes four zmm of
// unsigned codes u (value = d * scale_s * (u - offset) - dmin * min_s), each 16-byte chunk one
// sub-block of 16 values, plus the per-lane float scale and min. The loaders never reorder
// bytes: they take the planes of quants as GGUF stores them (nibbles, 2-bit planes, high-bit
// masks) and the ChunkMap records which sub-block each chunk then holds; the activations are
// laid out to match once per call. Offsets: q6_K 32, q3_K 4, iq4_xs 128 (its signed levels
// looked up +128); q2_K/q4_K/q5_K have none but mins.
#include "cpu/kernels.h"
#include "cpu/kernels_avx512_quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include "cpu/immintrin_quiet.h"

#include <cstring>

#include "cpu/kernels_avx512_codes.h"
#include "cpu/kernels_table_setup.h"

namespace tensorpc::cpu {
namespace {

// (a & c) | b, bitwise: merges low bits a (under mask c) with high bits b already in place.
inline __m512i merge_bits(__m512i a, __m512i b, __m512i c) { return _mm512_ternarylogic_epi32(a, b, c, 0xEC); }

// Per 16-bit lane: count `lo` in the lower 256 bits, `hi` in the upper.
inline __m512i split_counts(short lo, short hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(lo), _mm256_set1_epi16(hi), 1);
}

// 32 bytes at p in both 256-bit halves.
inline __m512i broadcast32(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }
inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// 16 unsigned bytes widened to floats.
inline __m512 bytes_to_ps(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }

// q2_K and q3_K store four 2-bit planes per half of 128 values: plane s of qs[32 h + l] is value
// 128 h + 32 s + l. Register s takes plane s of both halves.
constexpr ChunkMap kPlaneChunks = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
// q4_K/q5_K: in each 64 values, the low nibbles of 32 bytes then their high nibbles. Register 0
// takes the low nibbles of qs[0..63], 1 their high nibbles, 2 and 3 the same of qs[64..127].
constexpr ChunkMap kNibbleChunks = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};

struct Q2K {
  static constexpr ChunkMap kChunks = kPlaneChunks;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = false;  // one scale per 16 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockQ2_K);
  static constexpr LaneIndex kLanes = lane_index(kChunks, 1, 0);

  static WeightCodes load(const uint8_t* p) {
    const __m512i q = load64(p + offsetof(BlockQ2_K, qs));
    const __m512i m3 = _mm512_set1_epi8(3);
    WeightCodes w;
    w.u[0] = _mm512_and_si512(q, m3);
    w.u[1] = _mm512_and_si512(_mm512_srli_epi16(q, 2), m3);
    w.u[2] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m3);
    w.u[3] = _mm512_and_si512(_mm512_srli_epi16(q, 6), m3);
    // scales[j]: low nibble the scale, high nibble the min of sub-block j.
    const __m512i sm = _mm512_permutexvar_epi32(
        load_index(kLanes), _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    const __m512i m15 = _mm512_set1_epi32(15);
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(sm, m15)),
                            _mm512_set1_ps(f16_at(p + offsetof(BlockQ2_K, d))));
    w.min = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4)),
                          _mm512_set1_ps(-f16_at(p + offsetof(BlockQ2_K, dmin))));
    return w;
  }
};

struct Q3K {
  static constexpr ChunkMap kChunks = kPlaneChunks;
  static constexpr int kOffset = 4;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = false;  // one scale per 16 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockQ3_K);
  static constexpr LaneIndex kLanes = lane_index(kChunks, 1, 0);

  static WeightCodes load(const uint8_t* p) {
    const __m512i q = load64(p + offsetof(BlockQ3_K, qs));
    // The third bit of value 32 t + l is bit t of hmask[l]: register s needs bit s (first half,
    // t = s) and bit s + 4 (second half, t = s + 4), each set adding 4 to the code.
    const __m512i hm = broadcast32(p + offsetof(BlockQ3_K, hmask));
    const __m512i m3 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    WeightCodes w;
    for (int s = 0; s < 4; ++s) {
      const __m512i low = _mm512_and_si512(_mm512_srl_epi16(q, _mm_cvtsi32_si128(2 * s)), m3);
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << s)),
                                             _mm256_set1_epi8(static_cast<char>(1 << (s + 4))), 1);
      w.u[s] = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, bit), low, four);
    }
    // 16 6-bit scales: the low nibble of scale j is scales[j] & 15 (j < 8) or scales[j - 8] >> 4,
    // its top two bits (scales[8 + j % 4] >> 2 (j / 4)) & 3. The block ends 2 bytes after the
    // 12 scale bytes, so they are loaded masked.
    const __m128i s12 = _mm_maskz_loadu_epi8(0x0fff, p + offsetof(BlockQ3_K, scales));
    const __m128i lows = _mm_shuffle_epi8(s12, _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m128i first = _mm_setr_epi8(15, 15, 15, 15, 15, 15, 15, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128i low = _mm_or_si128(
        _mm_and_si128(lows, first), _mm_andnot_si128(first, _mm_and_si128(_mm_srli_epi16(lows, 4), _mm_set1_epi8(15))));
    const __m128i tops = _mm_shuffle_epi8(s12, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i top = _mm_slli_epi16(
        _mm_and_si128(_mm_srlv_epi16(tops, _mm_setr_epi16(0, 0, 2, 2, 4, 4, 6, 6)), _mm_set1_epi8(3)), 4);
    const __m512i sc = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_or_si128(low, top)), _mm512_set1_epi32(32));
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(load_index(kLanes), sc)),
                            _mm512_set1_ps(f16_at(p + offsetof(BlockQ3_K, d))));
    w.min = _mm512_setzero_ps();
    return w;
  }
};

// The 8 scales and 8 mins (6 bits each) of q4_K/q5_K as 16 bytes, scales first (quant.h,
// k_scale_min), from the 16 bytes at `packed` (12 used). In vector registers: scalar bit
// tricks through memory stall on store forwarding into the vector load.
inline __m128i k4_scales_mins(const uint8_t* packed) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  // Low parts: scale j < 4: q[j] & 63; j >= 4: q[j + 4] & 15; min j < 4: q[j + 4] & 63;
  // min j >= 4: q[j + 4] >> 4.
  const __m128i low_src = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i low_mask = _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
  const __m128i nib_mask = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15);
  const __m128i low =
      _mm_or_si128(_mm_and_si128(low_src, low_mask), _mm_and_si128(_mm_srli_epi16(low_src, 4), nib_mask));
  // Top two bits of scale j >= 4: q[j - 4] >> 6; of min j >= 4: q[j] >> 6; moved to bits 4, 5.
  const __m128i top_src = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7));
  const __m128i top_mask = _mm_setr_epi8(0, 0, 0, 0, 48, 48, 48, 48, 0, 0, 0, 0, 48, 48, 48, 48);
  return _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(top_src, 2), top_mask));
}

// Scale and min lanes of q4_K/q5_K: bytes 0..7 of sm are the scales, 8..15 the mins.
template <typename Format>
inline void k4_lanes(const uint8_t* block, WeightCodes& w) {
  static constexpr LaneIndex kScaleLanes = lane_index(Format::kChunks, 2, 0);
  static constexpr LaneIndex kMinLanes = lane_index(Format::kChunks, 2, 8);
  const __m512 sm = bytes_to_ps(k4_scales_mins(block + 4));
  w.scale = _mm512_mul_ps(_mm512_permutexvar_ps(load_index(kScaleLanes), sm), _mm512_set1_ps(f16_at(block)));
  w.min = _mm512_mul_ps(_mm512_permutexvar_ps(load_index(kMinLanes), sm), _mm512_set1_ps(-f16_at(block + 2)));
}

struct Q4K {
  static constexpr ChunkMap kChunks = kNibbleChunks;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockQ4_K);

  static WeightCodes load(const uint8_t* p) {
    const __m512i a = load64(p + offsetof(BlockQ4_K, qs)), b = load64(p + offsetof(BlockQ4_K, qs) + 64);
    const __m512i m15 = _mm512_set1_epi8(15);
    WeightCodes w;
    w.u[0] = _mm512_and_si512(a, m15);
    w.u[1] = _mm512_and_si512(_mm512_srli_epi16(a, 4), m15);
    w.u[2] = _mm512_and_si512(b, m15);
    w.u[3] = _mm512_and_si512(_mm512_srli_epi16(b, 4), m15);
    k4_lanes<Q4K>(p, w);
    return w;
  }
};

struct Q5K {
  static constexpr ChunkMap kChunks = kNibbleChunks;
  static constexpr int kOffset = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockQ5_K);

  static WeightCodes load(const uint8_t* p) {
    const __m512i a = load64(p + offsetof(BlockQ5_K, qs)), b = load64(p + offsetof(BlockQ5_K, qs) + 64);
    // The fifth bit of value 32 t + l is bit t of qh[l]. Register 0 holds t = 0 (first half)
    // and t = 2 (second half), register 1 t = 1 and 3, registers 2 and 3 t = 4, 6 and 5, 7:
    // each bit is shifted to bit 4 within its byte (16-bit shifts; the mask drops what crosses).
    const __m512i qh = broadcast32(p + offsetof(BlockQ5_K, qh));
    const __m512i m15 = _mm512_set1_epi8(15), m16 = _mm512_set1_epi8(16);
    auto high = [&](__m512i shifted) { return _mm512_and_si512(shifted, m16); };
    WeightCodes w;
    w.u[0] = merge_bits(a, high(_mm512_sllv_epi16(qh, split_counts(4, 2))), m15);
    w.u[1] = merge_bits(_mm512_srli_epi16(a, 4), high(_mm512_sllv_epi16(qh, split_counts(3, 1))), m15);
    w.u[2] = merge_bits(b, high(_mm512_srlv_epi16(qh, split_counts(0, 2))), m15);
    w.u[3] = merge_bits(_mm512_srli_epi16(b, 4), high(_mm512_srlv_epi16(qh, split_counts(1, 3))), m15);
    k4_lanes<Q5K>(p, w);
    return w;
  }
};

struct Q6K {
  // Register 0: values 0..63 (low nibbles of ql[0..63]), 1: 64..127 (their high nibbles),
  // 2 and 3 the same for the second half: value order, sub-block 4 r + c in chunk c.
  static constexpr ChunkMap kChunks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  static constexpr int kOffset = 32;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = false;  // one scale per 16 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockQ6_K);
  static constexpr LaneIndex kLanes = lane_index(kChunks, 1, 0);

  static WeightCodes load(const uint8_t* p) {
    const __m512i l0 = load64(p), l1 = load64(p + 64);
    // Top two bits of value l + 32 s (per half): bits 2s, 2s+1 of qh[l], moved to bits 4, 5.
    const __m512i h0 = broadcast32(p + offsetof(BlockQ6_K, qh));
    const __m512i h1 = broadcast32(p + offsetof(BlockQ6_K, qh) + 32);
    const __m512i m15 = _mm512_set1_epi8(15), m48 = _mm512_set1_epi8(48);
    const __m512i up = split_counts(4, 2), down = split_counts(0, 2);
    auto high = [&](__m512i shifted) { return _mm512_and_si512(shifted, m48); };
    WeightCodes w;
    w.u[0] = merge_bits(l0, high(_mm512_sllv_epi16(h0, up)), m15);
    w.u[1] = merge_bits(_mm512_srli_epi16(l0, 4), high(_mm512_srlv_epi16(h0, down)), m15);
    w.u[2] = merge_bits(l1, high(_mm512_sllv_epi16(h1, up)), m15);
    w.u[3] = merge_bits(_mm512_srli_epi16(l1, 4), high(_mm512_srlv_epi16(h1, down)), m15);
    const __m512i sc =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + offsetof(BlockQ6_K, scales))));
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_permutexvar_epi32(load_index(kLanes), sc)),
                            _mm512_set1_ps(f16_at(p + offsetof(BlockQ6_K, d))));
    w.min = _mm512_setzero_ps();
    return w;
  }
};

struct IQ4XS {
  static constexpr ChunkMap kChunks = kHalfChunks;
  static constexpr int kOffset = 128;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = false;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kTranspose;
  static constexpr size_t kBlockBytes = sizeof(BlockIQ4_XS);

  static WeightCodes load(const uint8_t* p) {
    const __m512i a = load64(p + offsetof(BlockIQ4_XS, qs)), b = load64(p + offsetof(BlockIQ4_XS, qs) + 64);
    const __m512i m15 = _mm512_set1_epi8(15), levels = iq4_levels();
    WeightCodes w;
    w.u[0] = _mm512_shuffle_epi8(levels, _mm512_and_si512(a, m15));
    w.u[1] = _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(a, 4), m15));
    w.u[2] = _mm512_shuffle_epi8(levels, _mm512_and_si512(b, m15));
    w.u[3] = _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(b, 4), m15));
    // Scale of the lane's 32 values j: low nibble = bits 4j..4j+3 of scales_l (as a u32), top
    // bits = bits 2j, 2j+1 of scales_h. Shift counts per lane are constant.
    static constexpr LaneIndex kLow = [] {
      LaneIndex s = lane_index(kChunks, 2, 0);
      for (int32_t& v : s.v) v *= 4;
      return s;
    }();
    static constexpr LaneIndex kHigh = [] {
      LaneIndex s = lane_index(kChunks, 2, 0);
      for (int32_t& v : s.v) v *= 2;
      return s;
    }();
    uint16_t sh;
    uint32_t sl;
    std::memcpy(&sh, p + offsetof(BlockIQ4_XS, scales_h), 2);
    std::memcpy(&sl, p + offsetof(BlockIQ4_XS, scales_l), 4);
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(sl)), load_index(kLow)),
                                         _mm512_set1_epi32(15));
    const __m512i top =
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(sh), load_index(kHigh)), _mm512_set1_epi32(3));
    const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(top, 4)), _mm512_set1_epi32(32));
    w.scale = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(f16_at(p)));
    w.min = _mm512_setzero_ps();
    return w;
  }
};

}  // namespace

void add_avx512_qk_kernels(KernelTable& t) {
  set_superblock_gemms<Q2K, Q3K, Q4K, Q5K, Q6K, IQ4XS>(
      t, [](auto f) -> GemmFn { return gemm_codes<typename decltype(f)::type>; });
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: avx512_kernels() returns no table anyway

namespace tensorpc::cpu {
void add_avx512_qk_kernels(KernelTable&) {}
}  // namespace tensorpc::cpu

#endif
