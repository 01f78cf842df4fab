// The operations a graph node can compute, and what each one's params mean.
//
// Every op has a shape rule, checked when the node is built (context.h), and
// a CPU kernel (src/cpu). The numeric values are part of the wire protocol:
// append new ops, never renumber.
#pragma once

#include <cstdint>

namespace tensorpc {

enum class Op : uint32_t {
  none = 0,  // a leaf: weight or input

  // Element-wise binary ops: result = a (op) b, b's rows broadcast over a's
  // (each dim of b is 1 or equal to a's). Result has a's shape, f32.
  add = 1,
  sub = 2,
  mul = 3,
  div = 4,

  scale = 5,  // a * s.                        params: f32 s
  mul_mat = 6,  // a [K,M,…] x b [K,N,…] -> f32 [M,N,…]; dims 2,3 of a broadcast over b's
  get_rows = 7, // a [K,R,B] rows picked by i32 b [n,B] -> f32 [K,n,B]
  cpy = 8,      // src[0]'s values written into this tensor's layout and type (cont, cast, cpy)
  rms_norm = 9, // x / sqrt(mean(x^2) + eps) per row.   params: f32 eps
  norm = 10,    // (x - mean) / sqrt(var + eps) per row. params: f32 eps
  rope = 11,    // rotary embedding of x [D,H,T,1] at positions i32 [T], with
                // optional f32 frequency factors src[2] [n_dims/2]. params: see
                // "rope's params" below
  soft_max = 12,  // softmax(x * scale + mask) per row; mask (optional src[1]) is
                  // f32 [ne0, >=ne1], broadcast over dims 2,3.  params: f32 scale
  silu = 13,
  gelu = 14,       // tanh approximation
  swiglu = 15,     // silu(a) * b, same shapes
  diag_mask_inf = 16,  // causal mask: x[i0,i1,…] = -inf where i0 > n_past + i1. params: i32 n_past
  concat = 17,     // a and b joined along dim.  params: i32 dim
  argmax = 18,     // index of the largest value of each row -> i32 [ne1,ne2,ne3]

  // Views: change the descriptor only, compute nothing.
  view = 19,       // params: none (view_offset and ne/nb say it all)
  reshape = 20,
  permute = 21,    // params: i32 axes[4]: source dim i goes to result dim axes[i]
  transpose = 22,

  // Row scatter: the rows of src[0] (f32 [K, n]) written into this tensor — a
  // view of a destination [K, R] (f32, f16, bf16, q8_0 or q4_0) — at the row
  // indices i32 src[1] [n], converted to the destination's type. Rows whose
  // index is outside [0, R) are skipped; with repeated indices, which row
  // lands is unspecified. Writes a KV cache at positions given as data, so a
  // decode step's graph does not change with the position.
  set_rows = 23,

  // The k largest values of each row of f32 a [n, …] and where they are:
  // f32 [k, 2, …], row 0 the values, largest first, row 1 their indices in
  // the row (exact as floats: n <= 2^24). Ties go to the lower index; NaN
  // ranks below -inf. Lets a sampler read k candidates instead of a whole
  // vocabulary of logits.  params: i32 k (1 <= k <= n)
  top_k = 24,

  tanh = 25,  // element-wise tanh(a), f32

  // A token sampled from candidates f32 [k, 2] as top_k lays them out (the
  // largest logits and their ids in a vocabulary of n_vocab >= k), with the
  // repetition penalty on the ids in i32 src[1] [m] (negative ids ignored)
  // and the draw in i32 src[2] [2], 53 random bits (low 32, then high 21):
  // i32 [1], the token — or kSampleNoToken (no finite candidate),
  // kSampleUndecided (every candidate +inf and k < n_vocab: more may be
  // outside) or kSampleBadCandidates (an id outside the vocabulary or twice).
  // The chain is the client's (src/core/sample_chain.h), so with the same
  // inputs a server picks the token the client would.  params: see "sample's
  // params" below
  sample = 26,

  // Mixture of experts (from protocol 1.12).
  //
  // The expert-indexed matrix multiply: experts a [K, M, E] (any weight type
  // mul_mat takes; expert e is the matrix a[:, :, e]), f32 activations
  // b [K, n_b, T] with n_b = 1 (each chosen expert reads token t's one row)
  // or n_b = k (slot s reads row s), and each token's chosen experts i32 ids
  // [k, T], each in [0, E): f32 [M, k, T], row (s, t) = expert ids[s, t] x
  // b's row (n_b == 1 ? 0 : s, t). Only the chosen experts' weights are read;
  // an id outside [0, E) makes that row zeros.
  mul_mat_id = 27,
  // The indices of the k largest values of each row of f32 a [n, …]: i32
  // [k, …], in top_k's order (largest first, ties to the lower index, NaN
  // below -inf). The router's choice of experts.  params: i32 k (1 <= k <= n)
  top_k_ids = 28,
  // gpt-oss's clamped SwiGLU of gate a and up b (same shapes): with
  // g = min(a, limit) and u = clamp(b, -limit, limit),
  // g * sigmoid(alpha * g) * (u + 1).  params: f32 alpha, f32 limit (> 0)
  // min and clamp are std::fmin/fmax's: a NaN gate or up counts as limit.
  swiglu_clamp = 29,
  // Element-wise 1 / (1 + e^-a), f32 (Qwen2-MoE's shared-expert gate).
  sigmoid = 30,
};

inline constexpr uint32_t kOpCount = 31;

// rope's params, by slot:
//   0 i32 n_dims (rotated dims, even, <= D)
//   1 i32 mode: 0 normal (pairs (2i, 2i+1)) or 2 neox (pairs (i, i + n_dims/2)),
//         plus kRopeYarnBit when slots 4..7 are set
//   2 f32 freq_base    3 f32 freq_scale
//   4 f32 ext_factor   5 f32 attn_factor
//   6 f32 corr_low     7 f32 corr_high: YaRN's ramp runs from pair corr_low
//         (the original angle's share ext_factor) to pair corr_high (share
//         0: all interpolated); Context
//         computes them from n_ctx_orig, beta_fast and beta_slow, clamped to
//         [0, n_dims - 1]
// Without kRopeYarnBit slots 4..7 are 0 and mean ext_factor 0, attn_factor 1:
// a plain rope node is the one protocol 1.7 knew, and a server that predates
// the bit refuses a node with it (an unknown mode) rather than computing
// plain rope in its place.
inline constexpr int kRopeParamNDims = 0;
inline constexpr int kRopeParamMode = 1;
inline constexpr int kRopeParamFreqBase = 2;
inline constexpr int kRopeParamFreqScale = 3;
inline constexpr int kRopeParamExtFactor = 4;
inline constexpr int kRopeParamAttnFactor = 5;
inline constexpr int kRopeParamCorrLow = 6;
inline constexpr int kRopeParamCorrHigh = 7;
inline constexpr int32_t kRopeYarnBit = 1 << 8;

// sample's params, by slot: 0 f32 temperature, 1 i32 top_k, 2 f32 top_p,
// 3 f32 min_p, 4 f32 repeat_penalty, 5 i32 n_vocab (SampleSettings, context.h).
inline constexpr int kSampleParamTemperature = 0;
inline constexpr int kSampleParamTopK = 1;
inline constexpr int kSampleParamTopP = 2;
inline constexpr int kSampleParamMinP = 3;
inline constexpr int kSampleParamRepeatPenalty = 4;
inline constexpr int kSampleParamNVocab = 5;
inline constexpr int32_t kSampleNoToken = -1;
inline constexpr int32_t kSampleUndecided = -2;
inline constexpr int32_t kSampleBadCandidates = -3;

// The longest row top_k takes: every index below it is exact as a float.
inline constexpr int64_t kTopKMaxRow = int64_t{1} << 24;

const char* name_of(Op op);
// True for view, reshape, permute and transpose.
bool is_view_op(Op op);

}  // namespace tensorpc
