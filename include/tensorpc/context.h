// Context: owns tensor descriptors and builds graph nodes.
//
// A Context is an arena of Tensor descriptors (never of their bytes). Every
// builder checks its shape rule and throws Error naming the op and the shapes
// when the inputs cannot be combined; a node that was returned is valid.
// Tensors of different contexts may be mixed (a model's weights in one, each
// step's graph in another); a context must outlive every graph that uses its
// tensors. Not thread-safe: one thread builds in a context at a time.
#pragma once

#include <deque>
#include <initializer_list>
#include <string>

#include "tensorpc/status.h"
#include "tensorpc/tensor.h"

namespace tensorpc {

inline constexpr int kRopeNormal = 0;  // rotates pairs (2i, 2i+1)
inline constexpr int kRopeNeox = 2;    // rotates pairs (i, i + n_dims/2)

// Rotary embedding parameters. Pair i of the first n_dims dims of a head, at
// position pos, turns by theta_i = pos · freq_base^(-2i/n_dims) / f_i (f_i:
// freq_factors[i], or 1). freq_scale < 1 is linear position interpolation
// (theta_i × freq_scale). ext_factor > 0 turns on YaRN: pairs below the one
// that makes beta_fast turns over n_ctx_orig positions keep the original
// theta_i, pairs beyond the one that makes beta_slow turns take the
// interpolated one, a linear ramp mixes the two between (ext_factor weights
// the original's share), and cos/sin are scaled by
// attn_factor · (1 + 0.1 · ln(1/freq_scale)). Without YaRN they are scaled by
// attn_factor alone.
struct RopeParams {
  int n_dims = 0;              // rotated dims per head (even, <= head dim)
  int mode = kRopeNormal;      // kRopeNormal or kRopeNeox
  float freq_base = 10000.0f;  // finite, > 0 (> 1 for YaRN)
  float freq_scale = 1.0f;     // finite, > 0
  int n_ctx_orig = 0;          // YaRN: the context the model was trained with (> 0 when ext_factor > 0)
  float ext_factor = 0.0f;     // YaRN: 0 off, 1 on; in [0, 1]
  float attn_factor = 1.0f;    // finite, > 0
  float beta_fast = 32.0f;     // YaRN: finite, > 0
  float beta_slow = 1.0f;      // YaRN: finite, > 0
};

// The sample op's settings (op.h; the chain is described in
// src/model/sampler.h).
struct SampleSettings {
  float temperature = 0.8f;     // >= 0; 0 = greedy
  int top_k = 40;               // >= 0; 0 = off
  float top_p = 0.95f;          // in (0, 1]; 1 = off
  float min_p = 0.0f;           // in [0, 1]; 0 = off
  float repeat_penalty = 1.0f;  // > 0; 1 = off

  // invalid_argument naming the first setting out of range (NaN included),
  // prefixed with `who`.
  Status validate(const std::string& who) const;
  bool operator==(const SampleSettings&) const = default;
};

class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // ---- leaves -------------------------------------------------------------
  // A new contiguous tensor; ne has 1 to 4 entries, each >= 1 (0 is allowed
  // for empty tensors). ne[0] must be a multiple of the type's block size.
  Tensor* new_tensor(DType type, std::initializer_list<int64_t> ne, std::string name = {});
  Tensor* new_tensor(DType type, const int64_t* ne, int n_dims, std::string name = {});
  // A new tensor with a's type and shape (not its data).
  Tensor* like(const Tensor* a, std::string name = {});

  // ---- element-wise -------------------------------------------------------
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* sub(Tensor* a, Tensor* b);
  Tensor* mul(Tensor* a, Tensor* b);
  Tensor* div(Tensor* a, Tensor* b);
  Tensor* scale(Tensor* a, float s);
  Tensor* silu(Tensor* a);
  Tensor* gelu(Tensor* a);
  Tensor* tanh(Tensor* a);
  Tensor* sigmoid(Tensor* a);
  Tensor* swiglu(Tensor* a, Tensor* b);
  // gpt-oss's SwiGLU, clamped at ±limit (op.h).
  Tensor* swiglu_clamp(Tensor* a, Tensor* b, float alpha, float limit);

  // ---- linear algebra and lookups ----------------------------------------
  Tensor* mul_mat(Tensor* a, Tensor* b);
  Tensor* get_rows(Tensor* a, Tensor* rows);
  Tensor* argmax(Tensor* a);
  Tensor* top_k(Tensor* a, int k);
  // The indices of top_k's k values, as i32 [k, …] (mixture-of-experts routing).
  Tensor* top_k_ids(Tensor* a, int k);
  // Experts a [K, M, E] applied to b [K, 1 or k, T] as ids i32 [k, T] choose
  // them: f32 [M, k, T] (op.h).
  Tensor* mul_mat_id(Tensor* a, Tensor* b, Tensor* ids);
  // The token the sampling chain picks from top_k's candidates f32 [k, 2]
  // for a vocabulary of n_vocab (>= k), the ids i32 [m] `recent` penalised
  // and the draw i32 [2] (low 32 bits, then high): i32 [1] (op.h).
  Tensor* sample(Tensor* candidates, Tensor* recent, Tensor* draw, const SampleSettings& s, int64_t n_vocab);

  // ---- normalisation, attention ------------------------------------------
  Tensor* rms_norm(Tensor* a, float eps);
  Tensor* norm(Tensor* a, float eps);
  // x f32 [head_dim, heads, tokens, 1] rotated at i32 positions [tokens]
  // (RopeParams). freq_factors: null, or f32 [n_dims/2], theta_i divided by
  // freq_factors[i] (Llama 3.1's rope_freqs.weight).
  Tensor* rope(Tensor* x, Tensor* positions, const RopeParams& p, Tensor* freq_factors = nullptr);
  // Plain rope with linear scaling; mode: kRopeNormal or kRopeNeox.
  Tensor* rope(Tensor* x, Tensor* positions, int n_dims, int mode, float freq_base = 10000.0f, float freq_scale = 1.0f);
  // softmax(a * scale + mask) per row. sinks (gpt-oss's attention sinks):
  // null, or f32 [a.ne[2]], one logit per head (dim 2) that joins each of the
  // head's rows in the normalisation and takes its share, not a column.
  Tensor* soft_max(Tensor* a, Tensor* mask = nullptr, float scale = 1.0f, Tensor* sinks = nullptr);
  Tensor* diag_mask_inf(Tensor* a, int n_past);

  // ---- copies and joins --------------------------------------------------
  // a's values copied into b (converted to b's type); returns a view of b.
  Tensor* cpy(Tensor* a, Tensor* b);
  // a materialised as a new contiguous tensor of the same type.
  Tensor* cont(Tensor* a);
  // a converted to `type` as a new contiguous tensor (quantizes for q8_0/q4_0).
  Tensor* cast(Tensor* a, DType type);
  Tensor* concat(Tensor* a, Tensor* b, int dim);
  // src's rows written into dst at the row indices `rows`; returns a view of dst.
  Tensor* set_rows(Tensor* dst, Tensor* src, Tensor* rows);

  // ---- views (descriptors only) ------------------------------------------
  // A view of a with shape ne and byte strides nb (nb[0] is the element
  // size), starting `offset` bytes into a. Must lie within a.
  Tensor* view(Tensor* a, std::initializer_list<int64_t> ne, std::initializer_list<uint64_t> nb, uint64_t offset);
  // a with a new shape of the same element count; a must be contiguous.
  Tensor* reshape(Tensor* a, std::initializer_list<int64_t> ne);
  // Source dim i becomes result dim axes[i]; axes is a permutation of 0..3.
  Tensor* permute(Tensor* a, int ax0, int ax1, int ax2, int ax3);
  Tensor* transpose(Tensor* a);  // swaps dims 0 and 1

  size_t size() const { return tensors_.size(); }

 private:
  Tensor* make(DType type, const std::array<int64_t, kMaxDims>& ne, Op op, std::initializer_list<Tensor*> srcs);
  Tensor* make_view(Tensor* a, Op op);
  Tensor* binary(Op op, Tensor* a, Tensor* b);
  Tensor* unary(Op op, Tensor* a);

  std::deque<Tensor> tensors_;  // deque: pointers stay valid as it grows
};

}  // namespace tensorpc
