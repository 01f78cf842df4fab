// The "avx512" table's 32-value block formats (q4_1, q5_0, q5_1, iq4_nl, mxfp4, and q8_0 for more
// than one activation row) against q8_0 activations.
//
// kernels_avx512_codes.h runs on groups of 256 values, so here a group is eight consecutive
// blocks. Each half (four blocks, 72 to 96 bytes) is read with one 64-byte load and one masked
// load of the rest, and word permutes gather its 4 x 16 quant bytes into one zmm (chunk c =
// block c), its f16 scales (and q4_1/q5_1 mins) into a vector, and for q5_0/q5_1 each block's 32
// high bits into chunk c of another, from which vpshufb + vptestmb make a byte mask. Low nibbles
// of the four blocks give one code register, high nibbles another; as both hold the same blocks
// chunk by chunk, interleaving dwords of the two halves (Arrange::kPairs) gives lanes of one
// scale each. Offsets: q5_0 16, iq4_nl 128 (its levels looked up +128); q4_1 and q5_1 add their
// min m times the activations' sum. q8_0 (offset 128) loads each block's 32 quants whole and
// flips their sign bits.
#include "cpu/kernels.h"
#include "cpu/kernels_avx512_quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

#include "cpu/immintrin_quiet.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "cpu/kernels_avx512_codes.h"
#include "cpu/kernels_table_setup.h"

namespace tensorpc::cpu {
namespace {

// Word indices for permutex2var_epi16 over the bytes of a half group (four blocks of B bytes,
// 72 to 96 bytes): x0 = bytes [0, 64), x1 = bytes [64, 4B) by a masked load. (Two overlapping
// unmasked loads read the same bytes too, but ran at half the speed from DRAM where measured.)
struct alignas(64) WordIndex {
  uint16_t v[32];
};
constexpr uint16_t word_at(int byte) { return static_cast<uint16_t>(byte / 2); }
// Chunk c = the 16 quant bytes of block c.
constexpr WordIndex qs_index(int block_bytes, int qs_offset) {
  WordIndex w{};
  for (int k = 0; k < 32; ++k) w.v[k] = word_at((k / 8) * block_bytes + qs_offset + 2 * (k % 8));
  return w;
}
// Words 4h + b: the f16 d of block b; words 8 + 4h + b: its f16 m (m_offset < 0: none).
constexpr WordIndex scale_index(int block_bytes, int m_offset, int half) {
  WordIndex w{};
  for (int b = 0; b < 4; ++b) {
    w.v[4 * half + b] = word_at(b * block_bytes);
    if (m_offset >= 0) w.v[8 + 4 * half + b] = word_at(b * block_bytes + m_offset);
  }
  return w;
}
// Whether every d (and m) of a half lies in its first 64 bytes (q4_1, iq4_nl), so the scales of
// a group come from the two halves' x0 with one permute: word indices of the second half's x0
// are those of the first plus 32.
constexpr bool scales_in_x0(int block_bytes, int m_offset) { return 3 * block_bytes + std::max(m_offset, 0) + 2 <= 64; }
constexpr WordIndex scale_index_x0(int block_bytes, int m_offset) {
  WordIndex w = scale_index(block_bytes, m_offset, 0);
  const WordIndex second = scale_index(block_bytes, m_offset, 1);
  for (int k = 0; k < 16; ++k)
    if (k % 8 >= 4) w.v[k] = static_cast<uint16_t>(second.v[k] + 32);
  return w;
}
// Chunk c, bytes 0..3 = qh of block c.
constexpr WordIndex qh_index(int block_bytes, int qh_offset) {
  WordIndex w{};
  for (int c = 0; c < 4; ++c)
    for (int j = 0; j < 2; ++j) w.v[8 * c + j] = word_at(c * block_bytes + qh_offset + 2 * j);
  return w;
}
inline __m512i load_words(const WordIndex& w) { return _mm512_load_si512(w.v); }

// How nibbles become codes: as they are, or looked up in the iq4_nl levels.
enum class Levels { kLinear, kIQ4 };

// One format: its Block, where its fields lie (-1: absent), its offset and its levels.
template <typename Block, int kQsOffset, int kMOffset, int kQhOffset, int kOffsetValue, Levels kLevels>
struct Blocks32Format {
  static constexpr ChunkMap kChunks = kHalfChunks;
  static constexpr int kOffset = kOffsetValue;
  static constexpr bool kHasMin = kMOffset >= 0;
  static constexpr bool kBlocks32 = true;
  static constexpr bool kScale32 = true;                // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kPairs;  // registers 0/1 and 2/3 share blocks
  static constexpr size_t kBlockBytes = sizeof(Block);
  static constexpr int B = static_cast<int>(sizeof(Block));
  static constexpr WordIndex kQs = qs_index(B, kQsOffset);
  static constexpr WordIndex kScale0 = scale_index(B, kMOffset, 0);
  static constexpr WordIndex kScale1 = scale_index(B, kMOffset, 1);
  static constexpr bool kScalesInX0 = scales_in_x0(B, kMOffset);
  static constexpr WordIndex kScaleX0 = scale_index_x0(B, kMOffset);
  static constexpr WordIndex kQh = qh_index(B, kQhOffset);
  static constexpr LaneIndex kScaleLanes = lane_block32_index(kChunks, kArrange, 0);
  static constexpr LaneIndex kMinLanes = lane_block32_index(kChunks, kArrange, 8);

  // Low and high nibble codes of the four blocks at p, and their scale words (scale_idx); with
  // kScalesInX0, the half's first 64 bytes as they are instead, for load to permute once.
  static void load_half(const uint8_t* p, __m512i& lo, __m512i& hi, __m512i& scales, const WordIndex& scale_idx) {
    const __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_maskz_loadu_epi8((1ull << (4 * B - 64)) - 1, p + 64);
    const __m512i qs = _mm512_permutex2var_epi16(x0, load_words(kQs), x1);
    const __m512i m15 = _mm512_set1_epi8(15);
    lo = _mm512_and_si512(qs, m15);
    hi = _mm512_and_si512(_mm512_srli_epi16(qs, 4), m15);
    scales = kScalesInX0 ? x0 : _mm512_permutex2var_epi16(x0, load_words(scale_idx), x1);
    if constexpr (kQhOffset >= 0) {
      // Bit j of block c's qh is bit 4 of value j: spread bytes 0-1 (values 0..15) and 2-3
      // (values 16..31) over the chunk, then test one bit per byte.
      const __m512i qh = _mm512_permutex2var_epi16(x0, load_words(kQh), x1);
      const __m512i lo_bytes =
          _mm512_set_epi64(0x0101010101010101, 0, 0x0101010101010101, 0, 0x0101010101010101, 0, 0x0101010101010101, 0);
      const __m512i hi_bytes = _mm512_add_epi8(lo_bytes, _mm512_set1_epi8(2));
      const __m512i bit = _mm512_set1_epi64(static_cast<long long>(0x8040201008040201ull));
      const __m512i sixteen = _mm512_set1_epi8(16);
      lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, lo_bytes), bit), lo, sixteen);
      hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, hi_bytes), bit), hi, sixteen);
    }
    if constexpr (kLevels == Levels::kIQ4) {
      const __m512i levels = iq4_levels();
      lo = _mm512_shuffle_epi8(levels, lo);
      hi = _mm512_shuffle_epi8(levels, hi);
    }
  }

  static WeightCodes load(const uint8_t* p) {
    WeightCodes w;
    __m512i s0, s1;
    load_half(p, w.u[0], w.u[1], s0, kScale0);
    load_half(p + 4 * B, w.u[2], w.u[3], s1, kScale1);
    // Words 0..7: d of blocks 0..7, words 8..15: their m.
    const __m512i words =
        kScalesInX0 ? _mm512_permutex2var_epi16(s0, load_words(kScaleX0), s1) : _mm512_mask_blend_epi16(0xF0F0, s0, s1);
    const __m512 dm = _mm512_cvtph_ps(_mm512_castsi512_si256(words));
    w.scale = _mm512_permutexvar_ps(load_index(kScaleLanes), dm);
    w.min = kHasMin ? _mm512_permutexvar_ps(load_index(kMinLanes), dm) : _mm512_setzero_ps();
    return w;
  }
};

using Q4_1 = Blocks32Format<BlockQ4_1, offsetof(BlockQ4_1, qs), offsetof(BlockQ4_1, m), -1, 0, Levels::kLinear>;
using Q5_0 = Blocks32Format<BlockQ5_0, offsetof(BlockQ5_0, qs), -1, offsetof(BlockQ5_0, qh), 16, Levels::kLinear>;
using Q5_1 = Blocks32Format<BlockQ5_1, offsetof(BlockQ5_1, qs), offsetof(BlockQ5_1, m), offsetof(BlockQ5_1, qh), 0,
                            Levels::kLinear>;
using IQ4_NL = Blocks32Format<BlockIQ4_NL, offsetof(BlockIQ4_NL, qs), -1, -1, 128, Levels::kIQ4>;
// q4_0 for the prefill tiles (kernels_avx512.cpp keeps its decode): codes q = level + 8.
using Q4_0Codes = Blocks32Format<BlockQ4_0, offsetof(BlockQ4_0, qs), -1, -1, 8, Levels::kLinear>;

// mxfp4's 17-byte blocks put their quant bytes at odd offsets, out of reach of the word permutes
// above (byte permutes need VBMI): each block's 16 bytes are one unaligned load into its chunk,
// then looked up in kMXFP4Values + 128 (offset 128) as iq4_nl's. The eight exponent bytes,
// gathered one by one, become the scales 2^(e - 128) (e8m0_half_to_fp32) in integer lanes,
// once per row and gemm call in the prefill panels (gemm_panels).
struct MXFP4 {
  static constexpr ChunkMap kChunks = kHalfChunks;
  static constexpr int kOffset = 128;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = true;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kPairs;
  static constexpr size_t kBlockBytes = sizeof(BlockMXFP4);
  static constexpr LaneIndex kScaleLanes = lane_block32_index(kChunks, kArrange, 0);

  // Low and high nibble codes of the four blocks at p.
  static void load_half(const uint8_t* p, __m512i& lo, __m512i& hi) {
    auto qs = [p](int b) { return reinterpret_cast<const __m128i*>(p + b * kBlockBytes + offsetof(BlockMXFP4, qs)); };
    // Chunk c = the 16 quant bytes of block c.
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu2_m128i(qs(1), qs(0))),
                                         _mm256_loadu2_m128i(qs(3), qs(2)), 1);
    const __m512i m15 = _mm512_set1_epi8(15);
    const __m512i levels = levels_plus_128<kMXFP4Values>();
    lo = _mm512_shuffle_epi8(levels, _mm512_and_si512(v, m15));
    hi = _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(v, 4), m15));
  }

  static WeightCodes load(const uint8_t* p) {
    WeightCodes w;
    load_half(p, w.u[0], w.u[1]);
    load_half(p + 4 * kBlockBytes, w.u[2], w.u[3]);
    auto e = [p](int b) { return static_cast<int>(p[b * kBlockBytes + offsetof(BlockMXFP4, e)]); };
    const __m256i ev = _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(ev, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), ev);
    const __m256i bits = _mm256_mask_blend_epi32(_mm256_cmplt_epu32_mask(ev, _mm256_set1_epi32(2)), normal, subnormal);
    w.scale = _mm512_permutexvar_ps(load_index(kScaleLanes), _mm512_zextps256_ps512(_mm256_castsi256_ps(bits)));
    w.min = _mm512_setzero_ps();
    return w;
  }
};

// q8_0 as codes u = q + 128 in the nibble formats' chunk layout (kHalfChunks): register 0 holds
// the first 16 quants of blocks 0..3, register 1 their last 16, registers 2 and 3 the same of
// blocks 4..7. One conversion to float per 256 values and activation row, where q8_0's decode
// kernel (kernels_avx512.cpp) converts each block's sums on their own.
struct Q8_0Codes {
  static constexpr ChunkMap kChunks = kHalfChunks;
  static constexpr int kOffset = 128;
  static constexpr bool kHasMin = false;
  static constexpr bool kBlocks32 = true;
  static constexpr bool kScale32 = true;  // one scale per 32 values
  static constexpr Arrange kArrange = Arrange::kPairs;
  static constexpr size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr LaneIndex kScaleLanes = lane_block32_index(kChunks, kArrange, 0);

  // The first and last 16 quants of the four blocks at p, as codes.
  static void load_half(const uint8_t* p, __m512i& first, __m512i& last) {
    auto qs = [p](int b) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + b * kBlockBytes + offsetof(BlockQ8_0, qs)));
    };
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    // 128-bit lanes: block 0 first, block 0 last, block 1 first, block 1 last (and 2, 3).
    const __m512i b01 = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qs(0)), qs(1), 1), flip);
    const __m512i b23 = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qs(2)), qs(3), 1), flip);
    first = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(2, 0, 2, 0));
    last = _mm512_shuffle_i64x2(b01, b23, _MM_SHUFFLE(3, 1, 3, 1));
  }

  static WeightCodes load(const uint8_t* p) {
    WeightCodes w;
    load_half(p, w.u[0], w.u[1]);
    load_half(p + 4 * kBlockBytes, w.u[2], w.u[3]);
    auto d = [p](int b) {
      uint16_t h;
      std::memcpy(&h, p + b * kBlockBytes + offsetof(BlockQ8_0, d), 2);
      return static_cast<short>(h);
    };
    const __m128i words = _mm_setr_epi16(d(0), d(1), d(2), d(3), d(4), d(5), d(6), d(7));
    w.scale = _mm512_permutexvar_ps(load_index(kScaleLanes), _mm512_zextps256_ps512(_mm256_cvtph_ps(words)));
    w.min = _mm512_setzero_ps();
    return w;
  }
};

}  // namespace

void gemm_q8_0_tiles(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                     size_t ldc) {
  gemm_codes<Q8_0Codes>(K, M, N, A, lda, B, ldb, C, ldc);
}

void gemm_q4_0_tiles(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                     size_t ldc) {
  gemm_codes<Q4_0Codes>(K, M, N, A, lda, B, ldb, C, ldc);
}

void add_avx512_q32_kernels(KernelTable& t) {
  set_blocks32_gemms<Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4>(
      t, [](auto f) -> GemmFn { return gemm_codes<typename decltype(f)::type>; });
}

}  // namespace tensorpc::cpu

#else  // compiler lacks the instruction set: avx512_kernels() returns no table anyway

namespace tensorpc::cpu {
void add_avx512_q32_kernels(KernelTable&) {}
}  // namespace tensorpc::cpu

#endif
