// AVX2 kernels of the K super-block formats q2_K, q3_K, q4_K, q5_K, q6_K and iq4_xs against
// q8_K activations.
//
// A super-block of 256 weights is unpacked into an Unpacked (below): eight ymm of bytes u,
// ymm k holding values 32k .. 32k+31, and per 16 values an int16 scale (and min). Then, with
// x the activation quants:
//   sum_j scale_j * sum_{i in j} (u_i - offset) * x_i
//     = sum_k madd(maddubs(u_k, x_k), scales of k)  -  offset * madd(bsums, scales),
// in int32, and the min term is dmin * madd(bsums, mins). Each ymm spans two 16-value
// sub-blocks, one per 128-bit lane, so "scales of k" puts scale 2k in the low lane and 2k+1 in
// the high one (formats with 32-value sub-blocks store each scale twice).
//
// Unsigned u per format: q2_K (0..3), q4_K (0..15), q5_K (0..31) with mins, offset 0;
// q3_K u = low2 + 4 * hbit, offset 4; q6_K offset 32. maddubs sums two u * x products in int16,
// which stays below 32767 while u <= 128 (q6_K: 2 * 63 * 127). iq4_xs values are signed table
// entries (kIQ4NLValues, via vpshufb), multiplied as |w| * (x * sign(w)).
//
// Decode (N = 1) unpacks each super-block in registers and uses it once, streaming one weight
// row in address order. Prefill unpacks two weight rows into a buffer (704 bytes per super-block
// of the pair: within a 32-48 KiB L1 up to K of about 11k-17k) and runs every activation column
// against both, so each activation load feeds two rows.
#include "cpu/kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels_avx2_float_tiles.h"
#include "cpu/kernels_avx2_quant.h"
#include "cpu/kernels_table_setup.h"

namespace tensorpc::cpu {
namespace {

// Calls fn(std::integral_constant<int, I>) for I = 0 .. N-1: the unrolled index is a
// constant, as shift immediates and register-resident arrays need.
template <typename Fn, int... I>
void unroll_impl(Fn&& fn, std::integer_sequence<int, I...>) {
  (fn(std::integral_constant<int, I>{}), ...);
}
template <int N, typename Fn>
void unroll(Fn&& fn) {
  unroll_impl(fn, std::make_integer_sequence<int, N>{});
}

// Shifts each 16-bit lane so that bit From lands on bit To.
template <int From, int To>
__m256i move_bit(__m256i v) {
  if constexpr (From > To) return _mm256_srli_epi16(v, From - To);
  if constexpr (From < To) return _mm256_slli_epi16(v, To - From);
  return v;
}

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

struct alignas(32) Unpacked {
  __m256i u[8];    // values 32k .. 32k+31 of the super-block
  __m256i scales;  // int16 scale of values 16j .. 16j+15, j = 0..15
  __m256i mins;    // int16 min of the same, for formats with kMins
  float d;
  float dmin;
};
static_assert(sizeof(Unpacked) == 352, "the buffer size in the file comment");

// The six formats. Each u stands for u - 2^kOffsetShift (no offset when kOffsetShift < 0); kMins:
// the format has mins; kSigned: u holds signed values (|u| <= 127).
struct Q2K {
  using Block = BlockQ2_K;
  static constexpr int kOffsetShift = -1;  // no offset
  static constexpr bool kMins = true, kSigned = false;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i m3 = _mm256_set1_epi8(3);
    unroll<2>([&](auto h) {
      const __m256i q = load256(b.qs + 32 * h);  // 2-bit plane s of values 128h + 32s + l
      unroll<4>([&](auto s) { out.u[4 * h + s] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3); });
    });
    const __m128i packed = load128(b.scales);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    out.scales = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
    out.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), m4));
    out.d = fp16_to_fp32(b.d);
    out.dmin = fp16_to_fp32(b.dmin);
  }
};

struct Q3K {
  using Block = BlockQ3_K;
  static constexpr int kOffsetShift = 2;  // u = low2 + 4 * hbit in 0..7, value u - 4
  static constexpr bool kMins = false, kSigned = false;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i m3 = _mm256_set1_epi8(3), bit2 = _mm256_set1_epi8(4);
    const __m256i hmask = load256(b.hmask);  // bit p of byte l: third bit of value 32p + l
    unroll<2>([&](auto h) {
      const __m256i q = load256(b.qs + 32 * h);
      unroll<4>([&](auto s) {
        constexpr int k = 4 * decltype(h)::value + decltype(s)::value;
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * s), m3);
        out.u[k] = _mm256_or_si256(low, _mm256_and_si256(move_bit<k, 2>(hmask), bit2));
      });
    });
    // The 16 6-bit scales: low nibbles from bytes 0..7 (low halves, then high halves), top two
    // bits of scale j at bits 2 (j / 4) of byte 8 + j % 4. Kept in registers: building them in
    // memory costs a failed store-to-load forward per super-block.
    uint32_t top;
    std::memcpy(&top, b.scales + 8, sizeof top);
    const __m128i low8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(low8, m4), _mm_and_si128(_mm_srli_epi16(low8, 4), m4));
    const __m128i high = _mm_and_si128(
        _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    const __m128i scales = _mm_or_si128(low, _mm_slli_epi16(high, 4));
    out.scales = _mm256_sub_epi16(_mm256_cvtepu8_epi16(scales), _mm256_set1_epi16(32));
    out.d = fp16_to_fp32(b.d);
  }
};

// q4_K/q5_K: the 6-bit scales and mins of the 8 sub-blocks of 32 (k_scale_min), each stored
// twice: once per 16-value half.
void k4_scales_mins(const uint8_t* packed, Unpacked& out) {
  uint32_t v0, v1, v2;  // scalars, not an array, so they stay in registers
  std::memcpy(&v0, packed, 4);
  std::memcpy(&v1, packed + 4, 4);
  std::memcpy(&v2, packed + 8, 4);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t scales_lo = v0 & m6, mins_lo = v1 & m6;
  const uint32_t scales_hi = (v2 & m4) | (((v0 >> 6) & m2) << 4);
  const uint32_t mins_hi = ((v2 >> 4) & m4) | (((v1 >> 6) & m2) << 4);
  const __m128i scales = _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), 0, 0);
  const __m128i mins = _mm_setr_epi32(static_cast<int>(mins_lo), static_cast<int>(mins_hi), 0, 0);
  out.scales = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(scales, scales));
  out.mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));
}

struct Q4K {
  using Block = BlockQ4_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true, kSigned = false;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    unroll<4>([&](auto p) {  // 64 values: low nibbles, then high nibbles of 32 bytes
      const __m256i q = load256(b.qs + 32 * p);
      out.u[2 * p] = _mm256_and_si256(q, m4);
      out.u[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    });
    k4_scales_mins(b.scales, out);
    out.d = fp16_to_fp32(b.d);
    out.dmin = fp16_to_fp32(b.dmin);
  }
};

struct Q5K {
  using Block = BlockQ5_K;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = true, kSigned = false;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    const __m256i qh = load256(b.qh);  // bit k of byte l: fifth bit of value 32k + l
    unroll<4>([&](auto p) {
      constexpr int k = 2 * decltype(p)::value;
      const __m256i q = load256(b.qs + 32 * p);
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      out.u[k] = _mm256_or_si256(lo, _mm256_and_si256(move_bit<k, 4>(qh), bit4));
      out.u[k + 1] = _mm256_or_si256(hi, _mm256_and_si256(move_bit<k + 1, 4>(qh), bit4));
    });
    k4_scales_mins(b.scales, out);
    out.d = fp16_to_fp32(b.d);
    out.dmin = fp16_to_fp32(b.dmin);
  }
};

struct Q6K {
  using Block = BlockQ6_K;
  static constexpr int kOffsetShift = 5;  // u in 0..63, value u - 32
  static constexpr bool kMins = false, kSigned = false;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8(0x30);
    unroll<2>([&](auto h) {
      // Value l + 32s of the half: nibble of ql[l + 32(s & 1)] (low for s < 2), bits 2s of qh[l].
      const __m256i l0 = load256(b.ql + 64 * h), l1 = load256(b.ql + 64 * h + 32);
      const __m256i qh = load256(b.qh + 32 * h);
      out.u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(move_bit<0, 4>(qh), top));
      out.u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(move_bit<2, 4>(qh), top));
      out.u[4 * h + 2] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(move_bit<4, 4>(qh), top));
      out.u[4 * h + 3] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(move_bit<6, 4>(qh), top));
    });
    out.scales = _mm256_cvtepi8_epi16(load128(b.scales));
    out.d = fp16_to_fp32(b.d);
  }
};

struct IQ4XS {
  using Block = BlockIQ4_XS;
  static constexpr int kOffsetShift = -1;
  static constexpr bool kMins = false, kSigned = true;
  static void unpack(const Block& b, Unpacked& out) {
    const __m256i table = _mm256_broadcastsi128_si256(load128(kIQ4NLValues));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    unroll<4>([&](auto t) {
      // 16 bytes per sub-block of 32: low nibbles are its first 16 values, high nibbles the rest.
      const __m256i q = load256(b.qs + 32 * t);  // sub-blocks 2t (low lane) and 2t+1 (high lane)
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      out.u[2 * t] = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
      out.u[2 * t + 1] = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
    });
    // Scale s = (nibble s of scales_l) | (bits 2s of scales_h) << 4, minus 32, in int32 lane s;
    // each int32 then holds it as two int16 (one per 16-value half).
    uint32_t low;
    std::memcpy(&low, b.scales_l, sizeof low);
    const __m128i nib = _mm_unpacklo_epi8(_mm_cvtsi32_si128(static_cast<int>(low & 0x0f0f0f0f)),
                                          _mm_cvtsi32_si128(static_cast<int>((low >> 4) & 0x0f0f0f0f)));
    const __m256i high =
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.scales_h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                         _mm256_set1_epi32(3));
    const __m256i s32 =
        _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(nib), _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
    out.scales = _mm256_or_si256(_mm256_and_si256(s32, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(s32, 16));
    out.d = fp16_to_fp32(b.d);
  }
};

// Adds the super-block dot products of R unpacked weight super-blocks w[r] with one activation
// super-block to acc[r].
template <typename F, int R>
void dot_superblock(const Unpacked* const* w, const BlockQ8_K& x, __m256* acc) {
  // Lane 0 of ymm k takes scale 2k, lane 1 scale 2k+1 (int16 indices into the 128-bit halves
  // holding scales 0..7 and 8..15).
  const auto pick = [](int m) {
    const char lo = static_cast<char>(4 * m), hi = static_cast<char>(4 * m + 2);
    return _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo,
                            lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                            hi, hi + 1);
  };
  __m256i first[R], second[R], sum[R];
  for (int r = 0; r < R; ++r) {
    first[r] = _mm256_permute2x128_si256(w[r]->scales, w[r]->scales, 0x00);
    second[r] = _mm256_permute2x128_si256(w[r]->scales, w[r]->scales, 0x11);
    sum[r] = _mm256_setzero_si256();
  }
  unroll<8>([&](auto k) {
    const __m256i xk = load256(x.qs + 32 * k);
    const __m256i sel = pick(k % 4);
    for (int r = 0; r < R; ++r) {
      const __m256i u = w[r]->u[k];
      const __m256i p16 =
          F::kSigned ? _mm256_maddubs_epi16(_mm256_abs_epi8(u), _mm256_sign_epi8(xk, u)) : _mm256_maddubs_epi16(u, xk);
      const __m256i sc = _mm256_shuffle_epi8(k < 4 ? first[r] : second[r], sel);
      sum[r] = _mm256_add_epi32(sum[r], _mm256_madd_epi16(p16, sc));
    }
  });
  const __m256i bsums = load256(x.bsums);
  float xd;
  std::memcpy(&xd, &x.d, sizeof xd);  // q8_K rows may be only 2-byte aligned
  for (int r = 0; r < R; ++r) {
    if constexpr (F::kOffsetShift >= 0)
      sum[r] = _mm256_sub_epi32(sum[r], _mm256_slli_epi32(_mm256_madd_epi16(bsums, w[r]->scales), F::kOffsetShift));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r]), _mm256_set1_ps(w[r]->d * xd), acc[r]);
    if constexpr (F::kMins) {
      const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, w[r]->mins));
      acc[r] = _mm256_fnmadd_ps(mins, _mm256_set1_ps(w[r]->dmin * xd), acc[r]);
    }
  }
}

struct UnpackedRowsTag {};

// flatten: decode needs the unpacked super-block to stay in registers from unpack to dot, and
// GCC otherwise keeps dot_superblock (and some unrolled bodies) out of line.
template <typename F>
__attribute__((flatten)) void gemm_k(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B,
                                     size_t ldb, float* C, size_t ldc) {
  using Block = typename F::Block;
  if (M <= 0 || N <= 0) return;
  const int64_t nb = K / kQK_K;
  if (N == 1) {
    const BlockQ8_K* x = row_at<BlockQ8_K>(B, 0, ldb);
    // Written out, not through for_each_streamed_row: as a lambda under flatten, Q2_K decode ran
    // at 0.55x in kernels_bench.
    for (int64_t i = 0; i < M; ++i) {
      const Block* a = row_at<Block>(A, i, lda);
      prefetch_rows_ahead(A, i, 1, M, lda);
      __m256 acc = _mm256_setzero_ps();
      for (int64_t q = 0; q < nb; ++q) {
        Unpacked w;
        F::unpack(a[q], w);
        const Unpacked* wp = &w;
        dot_superblock<F, 1>(&wp, x[q], &acc);
      }
      C[i] = hsum(acc);
    }
    return;
  }
  AlignedArray<Unpacked> owned;
  Unpacked* rows = call_scratch<Unpacked, UnpackedRowsTag>(std::max<size_t>(1, static_cast<size_t>(2 * nb)), owned);
  if (!rows) throw std::bad_alloc();  // the device fails the compute with a Status
  for (int64_t i = 0; i < M; i += 2) {
    const bool pair = i + 1 < M;
    for (int r = 0; r < (pair ? 2 : 1); ++r) {
      const Block* a = row_at<Block>(A, i + r, lda);
      for (int64_t q = 0; q < nb; ++q) F::unpack(a[q], rows[r * nb + q]);
    }
    for (int64_t j = 0; j < N; ++j) {
      const BlockQ8_K* x = row_at<BlockQ8_K>(B, j, ldb);
      __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      if (pair) {
        for (int64_t q = 0; q < nb; ++q) {
          const Unpacked* w[2] = {rows + q, rows + nb + q};
          dot_superblock<F, 2>(w, x[q], acc);
        }
        C[j * ldc + i + 1] = hsum(acc[1]);
      } else {
        for (int64_t q = 0; q < nb; ++q) {
          const Unpacked* w = rows + q;
          dot_superblock<F, 1>(&w, x[q], acc);
        }
      }
      C[j * ldc + i] = hsum(acc[0]);
    }
  }
}

}  // namespace

void add_avx2_qk_kernels(KernelTable& t) {
  set_superblock_gemms<Q2K, Q3K, Q4K, Q5K, Q6K, IQ4XS>(
      t, [](auto f) -> GemmFn { return gemm_k<typename decltype(f)::type>; });
}

}  // namespace tensorpc::cpu

#endif  // without AVX2 the table does not exist and kernels_avx2_quant.cpp does not call this
