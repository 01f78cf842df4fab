// The portable kernels of the weight formats beyond f32/f16/q8_0/q4_0: bf16, the 32-value block
// formats q4_1/q5_0/q5_1/iq4_nl/mxfp4 against q8_0 activations, and the K super-block formats
// q2_K … q6_K/iq4_xs against q8_K activations.
//
// Every quantized format is read the same way: a block is unpacked into small integers q and
// the scales that turn them into values, value = d * scale_j * q - dmin * min_j for the K
// formats (j the sub-block of 16) and value = d * q + m for the 32-value ones. The dot product
// with an activation block is then integer sums times those scales: the activations' bsums
// (sums of each 16 quants) give the min terms without touching the quants again.
#include <vector>

#include "core/float16.h"
#include "core/quant.h"
#include "cpu/aligned.h"
#include "cpu/kernels.h"
#include "cpu/kernels_portable_quant.h"
#include "cpu/kernels_table_setup.h"

namespace tensorpc::cpu {
namespace {

// A 32-value block as integers: value_i = d * q[i] + m.
struct Unpacked32 {
  int q[kQK];
  float d;
  float m;
};

int high_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

void unpack(const BlockQ4_1& b, Unpacked32& u) {
  for (int j = 0; j < kQK / 2; ++j) {
    u.q[j] = b.qs[j] & 0x0f;
    u.q[j + 16] = b.qs[j] >> 4;
  }
  u.d = fp16_to_fp32(b.d);
  u.m = fp16_to_fp32(b.m);
}

void unpack(const BlockQ5_0& b, Unpacked32& u) {
  for (int j = 0; j < kQK / 2; ++j) {
    u.q[j] = ((b.qs[j] & 0x0f) | (high_bit(b.qh, j) << 4)) - 16;
    u.q[j + 16] = ((b.qs[j] >> 4) | (high_bit(b.qh, j + 16) << 4)) - 16;
  }
  u.d = fp16_to_fp32(b.d);
  u.m = 0.0f;
}

void unpack(const BlockQ5_1& b, Unpacked32& u) {
  for (int j = 0; j < kQK / 2; ++j) {
    u.q[j] = (b.qs[j] & 0x0f) | (high_bit(b.qh, j) << 4);
    u.q[j + 16] = (b.qs[j] >> 4) | (high_bit(b.qh, j + 16) << 4);
  }
  u.d = fp16_to_fp32(b.d);
  u.m = fp16_to_fp32(b.m);
}

// Nibbles as q4_0, each an index into a table of levels.
void unpack_levels(const uint8_t* qs, const int8_t* levels, float d, Unpacked32& u) {
  for (int j = 0; j < kQK / 2; ++j) {
    u.q[j] = levels[qs[j] & 0x0f];
    u.q[j + 16] = levels[qs[j] >> 4];
  }
  u.d = d;
  u.m = 0.0f;
}

void unpack(const BlockIQ4_NL& b, Unpacked32& u) { unpack_levels(b.qs, kIQ4NLValues, fp16_to_fp32(b.d), u); }
void unpack(const BlockMXFP4& b, Unpacked32& u) { unpack_levels(b.qs, kMXFP4Values, e8m0_half_to_fp32(b.e), u); }

template <typename Block>
void gemm_blocks32(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                   size_t ldc) {
  const int64_t nb = K / kQK;
  std::vector<Unpacked32> row(static_cast<size_t>(nb));  // one weight row unpacked, reused for all j
  for (int64_t i = 0; i < M; ++i) {
    const Block* a = row_at<Block>(A, i, lda);
    for (int64_t q = 0; q < nb; ++q) unpack(a[q], row[q]);
    for (int64_t j = 0; j < N; ++j) {
      const BlockQ8_0* b = row_at<BlockQ8_0>(B, j, ldb);
      float sum = 0.0f;
      for (int64_t q = 0; q < nb; ++q) {
        int32_t dot = 0, bsum = 0;
        for (int t = 0; t < kQK; ++t) {
          dot += row[q].q[t] * int32_t{b[q].qs[t]};
          bsum += b[q].qs[t];
        }
        const float db = fp16_to_fp32(b[q].d);
        sum += row[q].d * db * static_cast<float>(dot) + row[q].m * db * static_cast<float>(bsum);
      }
      C[j * ldc + i] = sum;
    }
  }
}

// A super-block as integers: value_i = d * scale[i / 16] * q[i] - dmin * min[i / 16].
struct Unpacked256 {
  int q[kQK_K];
  int scale[kQK_K / 16];
  int min[kQK_K / 16];
  float d;
  float dmin;
};

void unpack(const BlockQ2_K& b, Unpacked256& u) {
  for (int i = 0; i < kQK_K; ++i) u.q[i] = (b.qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
  for (int j = 0; j < 16; ++j) {
    u.scale[j] = b.scales[j] & 0x0f;
    u.min[j] = b.scales[j] >> 4;
  }
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
}

void unpack(const BlockQ3_K& b, Unpacked256& u) {
  for (int i = 0; i < kQK_K; ++i) {
    const int low = (b.qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
    u.q[i] = low + 4 * ((b.hmask[i % 32] >> (i / 32)) & 1) - 4;
  }
  for (int j = 0; j < 16; ++j) {
    u.scale[j] = q3_K_scale(j, b.scales) - 32;
    u.min[j] = 0;
  }
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0.0f;
}

void unpack_scales_mins_k4(const uint8_t* packed, Unpacked256& u) {
  for (int j = 0; j < 8; ++j) {
    uint8_t scale, min;
    k_scale_min(j, packed, scale, min);
    u.scale[2 * j] = u.scale[2 * j + 1] = scale;
    u.min[2 * j] = u.min[2 * j + 1] = min;
  }
}

void unpack(const BlockQ4_K& b, Unpacked256& u) {
  for (int i = 0; i < kQK_K; ++i) {
    const uint8_t byte = b.qs[32 * (i / 64) + i % 32];
    u.q[i] = (i / 32) % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
  }
  unpack_scales_mins_k4(b.scales, u);
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
}

void unpack(const BlockQ5_K& b, Unpacked256& u) {
  for (int i = 0; i < kQK_K; ++i) {
    const uint8_t byte = b.qs[32 * (i / 64) + i % 32];
    const int low = (i / 32) % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
    u.q[i] = low | (((b.qh[i % 32] >> (i / 32)) & 1) << 4);
  }
  unpack_scales_mins_k4(b.scales, u);
  u.d = fp16_to_fp32(b.d);
  u.dmin = fp16_to_fp32(b.dmin);
}

void unpack(const BlockQ6_K& b, Unpacked256& u) {
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, s = (i % 128) / 32, l = i % 32;
    const uint8_t lbyte = b.ql[64 * half + l + 32 * (s & 1)];
    const int low = s < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
    u.q[i] = (low | (((b.qh[32 * half + l] >> (2 * s)) & 3) << 4)) - 32;
  }
  for (int j = 0; j < 16; ++j) {
    u.scale[j] = b.scales[j];
    u.min[j] = 0;
  }
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0.0f;
}

void unpack(const BlockIQ4_XS& b, Unpacked256& u) {
  for (int s = 0; s < 8; ++s) {
    const int scale = ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | (((b.scales_h >> (2 * s)) & 3) << 4);
    u.scale[2 * s] = u.scale[2 * s + 1] = scale - 32;
    u.min[2 * s] = u.min[2 * s + 1] = 0;
    for (int j = 0; j < 16; ++j) {
      u.q[32 * s + j] = kIQ4NLValues[b.qs[16 * s + j] & 0x0f];
      u.q[32 * s + j + 16] = kIQ4NLValues[b.qs[16 * s + j] >> 4];
    }
  }
  u.d = fp16_to_fp32(b.d);
  u.dmin = 0.0f;
}

template <typename Block>
void gemm_blocks256(int64_t K, int64_t M, int64_t N, const void* A, size_t lda, const void* B, size_t ldb, float* C,
                    size_t ldc) {
  const int64_t nb = K / kQK_K;
  std::vector<Unpacked256> row(static_cast<size_t>(nb));
  for (int64_t i = 0; i < M; ++i) {
    const Block* a = row_at<Block>(A, i, lda);
    for (int64_t q = 0; q < nb; ++q) unpack(a[q], row[q]);
    for (int64_t j = 0; j < N; ++j) {
      const BlockQ8_K* b = row_at<BlockQ8_K>(B, j, ldb);
      float sum = 0.0f;
      for (int64_t q = 0; q < nb; ++q) {
        const Unpacked256& u = row[q];
        int32_t scaled = 0, mins = 0;
        for (int s = 0; s < kQK_K / 16; ++s) {
          int32_t dot = 0;
          for (int t = 16 * s; t < 16 * s + 16; ++t) dot += u.q[t] * int32_t{b[q].qs[t]};
          scaled += u.scale[s] * dot;
          mins += u.min[s] * int32_t{b[q].bsums[s]};
        }
        sum += b[q].d * (u.d * static_cast<float>(scaled) - u.dmin * static_cast<float>(mins));
      }
      C[j * ldc + i] = sum;
    }
  }
}

void quantize_q8_K(const float* x, void* y, int64_t n) { quantize_row_q8_K_ref(x, static_cast<BlockQ8_K*>(y), n); }

}  // namespace

void add_portable_quant_kernels(KernelTable& t) {
  t.quantize_row_q8_K = quantize_q8_K;
  t.gemm_bf16 = gemm_bf16_portable;
  set_blocks32_gemms<BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockIQ4_NL, BlockMXFP4>(
      t, [](auto f) -> GemmFn { return gemm_blocks32<typename decltype(f)::type>; });
  set_superblock_gemms<BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockIQ4_XS>(
      t, [](auto f) -> GemmFn { return gemm_blocks256<typename decltype(f)::type>; });
}

}  // namespace tensorpc::cpu
