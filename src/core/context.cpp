// Graph node builders and their shape rules. Views live in context_views.cpp.
#include "tensorpc/context.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace tensorpc {
namespace {

[[noreturn]] void fail(Op op, const std::string& what) {
  throw Error(invalid_argument(std::string(name_of(op)) + ": " + what));
}

// Fails with `what` unless `ok`. A macro, so that the message (which names
// shapes) is built only on failure: builders run for every node of every
// step a model computes.
#define REQUIRE(ok, op, what)  \
  do {                         \
    if (!(ok)) fail(op, what); \
  } while (false)

void require_type(const Tensor* t, DType type, Op op, const char* role) {
  REQUIRE(t != nullptr, op, std::string(role) + " is null");
  REQUIRE(t->type == type, op, std::string(role) + " " + describe(*t) + " must be " + name_of(type));
}

void require_present(const Tensor* t, Op op, const char* role) {
  REQUIRE(t != nullptr, op, std::string(role) + " is null");
}

// Each dim of b is 1 or equal to a's.
bool broadcasts_onto(const Tensor& b, const Tensor& a) {
  for (int i = 0; i < kMaxDims; ++i) {
    if (b.ne[i] != 1 && b.ne[i] != a.ne[i]) return false;
  }
  return true;
}

bool is_float_type(DType t) { return t != DType::i32; }

}  // namespace

Tensor* Context::make(DType type, const std::array<int64_t, kMaxDims>& ne, Op op, std::initializer_list<Tensor*> srcs) {
  Tensor& t = tensors_.emplace_back();
  t.type = type;
  t.ne = ne;
  t.nb[0] = block_bytes(type);
  t.nb[1] = row_bytes(type, ne[0]);
  for (int i = 2; i < kMaxDims; ++i) t.nb[i] = t.nb[i - 1] * static_cast<uint64_t>(ne[i - 1]);
  t.op = op;
  int i = 0;
  for (Tensor* s : srcs) t.src[i++] = s;
  return &t;
}

Tensor* Context::new_tensor(DType type, const int64_t* ne, int n_dims, std::string name) {
  const Op op = Op::none;
  REQUIRE(n_dims >= 1 && n_dims <= kMaxDims, op, "a tensor has 1 to 4 dims, not " + std::to_string(n_dims));
  std::array<int64_t, kMaxDims> shape{1, 1, 1, 1};
  for (int i = 0; i < n_dims; ++i) {
    REQUIRE(ne[i] >= 0, op, "dim " + std::to_string(i) + " is negative (" + std::to_string(ne[i]) + ")");
    shape[i] = ne[i];
  }
  REQUIRE(shape[0] % block_size(type) == 0, op,
          std::string(name_of(type)) + " rows need ne[0] divisible by " + std::to_string(block_size(type)) + ", got " +
              std::to_string(shape[0]));
  Tensor* t = make(type, shape, op, {});
  t->name = std::move(name);
  return t;
}

Tensor* Context::new_tensor(DType type, std::initializer_list<int64_t> ne, std::string name) {
  return new_tensor(type, ne.begin(), static_cast<int>(ne.size()), std::move(name));
}

Tensor* Context::like(const Tensor* a, std::string name) {
  require_present(a, Op::none, "source");
  return new_tensor(a->type, a->ne.data(), kMaxDims, std::move(name));
}

Tensor* Context::binary(Op op, Tensor* a, Tensor* b) {
  require_type(a, DType::f32, op, "a");
  require_type(b, DType::f32, op, "b");
  REQUIRE(broadcasts_onto(*b, *a), op,
          "b " + describe(*b) + " does not broadcast onto a " + describe(*a) +
              " (each dim of b must be 1 or equal to a's)");
  return make(DType::f32, a->ne, op, {a, b});
}

Tensor* Context::unary(Op op, Tensor* a) {
  require_type(a, DType::f32, op, "a");
  return make(DType::f32, a->ne, op, {a});
}

Tensor* Context::add(Tensor* a, Tensor* b) { return binary(Op::add, a, b); }
Tensor* Context::sub(Tensor* a, Tensor* b) { return binary(Op::sub, a, b); }
Tensor* Context::mul(Tensor* a, Tensor* b) { return binary(Op::mul, a, b); }
Tensor* Context::div(Tensor* a, Tensor* b) { return binary(Op::div, a, b); }
Tensor* Context::silu(Tensor* a) { return unary(Op::silu, a); }
Tensor* Context::gelu(Tensor* a) { return unary(Op::gelu, a); }
Tensor* Context::tanh(Tensor* a) { return unary(Op::tanh, a); }
Tensor* Context::sigmoid(Tensor* a) { return unary(Op::sigmoid, a); }

Tensor* Context::scale(Tensor* a, float s) {
  Tensor* t = unary(Op::scale, a);
  t->set_param(0, s);
  return t;
}

Tensor* Context::swiglu(Tensor* a, Tensor* b) {
  const Op op = Op::swiglu;
  require_type(a, DType::f32, op, "a");
  require_type(b, DType::f32, op, "b");
  REQUIRE(same_shape(*a, *b), op, "a " + describe(*a) + " and b " + describe(*b) + " must have the same shape");
  return make(DType::f32, a->ne, op, {a, b});
}

Tensor* Context::swiglu_clamp(Tensor* a, Tensor* b, float alpha, float limit) {
  const Op op = Op::swiglu_clamp;
  REQUIRE(
      std::isfinite(alpha) && std::isfinite(limit) && limit > 0.0f, op,
      "alpha " + std::to_string(alpha) + " must be finite and limit " + std::to_string(limit) + " finite and positive");
  require_type(a, DType::f32, op, "a");
  require_type(b, DType::f32, op, "b");
  REQUIRE(same_shape(*a, *b), op, "a " + describe(*a) + " and b " + describe(*b) + " must have the same shape");
  Tensor* t = make(DType::f32, a->ne, op, {a, b});
  t->set_param(0, alpha);
  t->set_param(1, limit);
  return t;
}

Tensor* Context::mul_mat(Tensor* a, Tensor* b) {
  const Op op = Op::mul_mat;
  require_present(a, op, "a");
  require_present(b, op, "b");
  const auto shapes = [&] { return "a " + describe(*a) + " and b " + describe(*b); };
  REQUIRE(a->type != DType::i32 && a->type != DType::q8_K, op, shapes() + ": weights must be a float or quantized weight type");
  REQUIRE(b->type == DType::f32, op, shapes() + ": b must be f32");
  REQUIRE(a->ne[0] == b->ne[0], op, shapes() + ": ne[0] (K) must match");
  REQUIRE(a->ne[2] > 0 && a->ne[3] > 0 && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0, op,
          shapes() + ": dims 2 and 3 of b must be multiples of a's (a broadcasts over b)");
  REQUIRE(a->rows_are_contiguous(), op, shapes() + ": rows of a must be contiguous");
  return make(DType::f32, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]}, op, {a, b});
}

Tensor* Context::get_rows(Tensor* a, Tensor* rows) {
  const Op op = Op::get_rows;
  require_present(a, op, "a");
  require_type(rows, DType::i32, op, "rows");
  const auto shapes = [&] { return "a " + describe(*a) + " and rows " + describe(*rows); };
  REQUIRE(is_float_type(a->type), op, shapes() + ": a must be a float or quantized type");
  REQUIRE(rows->ne[2] == 1 && rows->ne[3] == 1 && a->ne[3] == 1, op, shapes() + ": a is [K,R,B], rows [n,B]");
  REQUIRE(rows->ne[1] == a->ne[2] || rows->ne[1] == 1, op, shapes() + ": rows.ne[1] must be 1 or a.ne[2]");
  REQUIRE(a->rows_are_contiguous(), op, shapes() + ": rows of a must be contiguous");
  return make(DType::f32, {a->ne[0], rows->ne[0], a->ne[2], 1}, op, {a, rows});
}

Tensor* Context::argmax(Tensor* a) {
  const Op op = Op::argmax;
  require_type(a, DType::f32, op, "a");
  REQUIRE(a->ne[0] > 0, op, "a " + describe(*a) + " has empty rows");
  return make(DType::i32, {a->ne[1], a->ne[2], a->ne[3], 1}, op, {a});
}

Tensor* Context::top_k(Tensor* a, int k) {
  const Op op = Op::top_k;
  require_type(a, DType::f32, op, "a");
  REQUIRE(k >= 1 && k <= a->ne[0], op,
          "k " + std::to_string(k) + " must be in [1, " + std::to_string(a->ne[0]) + "] for a " + describe(*a));
  REQUIRE(a->ne[0] <= kTopKMaxRow, op, "a " + describe(*a) + ": rows longer than 2^24 cannot carry exact indices");
  REQUIRE(a->ne[3] == 1, op, "a " + describe(*a) + " must have at most 3 dims");
  Tensor* t = make(DType::f32, {k, 2, a->ne[1], a->ne[2]}, op, {a});
  t->set_param(0, static_cast<int32_t>(k));
  return t;
}

Tensor* Context::top_k_ids(Tensor* a, int k) {
  const Op op = Op::top_k_ids;
  require_type(a, DType::f32, op, "a");
  REQUIRE(k >= 1 && k <= a->ne[0], op,
          "k " + std::to_string(k) + " must be in [1, " + std::to_string(a->ne[0]) + "] for a " + describe(*a));
  REQUIRE(a->ne[0] <= INT32_MAX, op, "a " + describe(*a) + ": rows longer than 2^31 - 1 have indices i32 cannot hold");
  Tensor* t = make(DType::i32, {k, a->ne[1], a->ne[2], a->ne[3]}, op, {a});
  t->set_param(0, static_cast<int32_t>(k));
  return t;
}

Tensor* Context::mul_mat_id(Tensor* a, Tensor* b, Tensor* ids) {
  const Op op = Op::mul_mat_id;
  require_present(a, op, "a");
  require_type(b, DType::f32, op, "b");
  require_type(ids, DType::i32, op, "ids");
  const auto shapes = [&] { return "a " + describe(*a) + ", b " + describe(*b) + " and ids " + describe(*ids); };
  REQUIRE(a->type != DType::i32 && a->type != DType::q8_K, op,
          shapes() + ": experts must be a float or quantized weight type");
  REQUIRE(a->ne[3] == 1 && a->ne[2] >= 1, op, shapes() + ": the experts are [K, M, E]");
  REQUIRE(a->ne[0] == b->ne[0], op, shapes() + ": ne[0] (K) must match");
  REQUIRE(ids->ne[2] == 1 && ids->ne[3] == 1 && ids->ne[0] >= 1, op, shapes() + ": ids are [k, T]");
  REQUIRE(b->ne[3] == 1 && b->ne[2] == ids->ne[1] && (b->ne[1] == 1 || b->ne[1] == ids->ne[0]), op,
          shapes() + ": b must be [K, 1 or k, T] for ids [k, T]");
  REQUIRE(a->rows_are_contiguous(), op, shapes() + ": rows of a must be contiguous");
  return make(DType::f32, {a->ne[1], ids->ne[0], ids->ne[1], 1}, op, {a, b, ids});
}

Tensor* Context::sample(Tensor* candidates, Tensor* recent, Tensor* draw, const SampleSettings& s, int64_t n_vocab) {
  const Op op = Op::sample;
  require_type(candidates, DType::f32, op, "candidates");
  require_type(recent, DType::i32, op, "recent");
  require_type(draw, DType::i32, op, "draw");
  const Tensor& c = *candidates;
  REQUIRE(c.ne[0] >= 1 && c.ne[1] == 2 && c.ne[2] == 1 && c.ne[3] == 1, op,
          "candidates " + describe(c) + " must be [k, 2]: values, then ids");
  REQUIRE(c.rows_are_contiguous(), op, "candidates " + describe(c) + ": rows must be contiguous");
  REQUIRE(n_vocab >= c.ne[0] && n_vocab <= kTopKMaxRow, op,
          "a vocabulary of " + std::to_string(n_vocab) + " must be in [k, 2^24] for candidates " + describe(c));
  REQUIRE(recent->ne[0] >= 1 && recent->nelements() == recent->ne[0] && recent->rows_are_contiguous(), op,
          "recent " + describe(*recent) + " must be one contiguous row");
  REQUIRE(draw->nelements() == 2 && draw->ne[0] == 2 && draw->rows_are_contiguous(), op,
          "draw " + describe(*draw) + " must be [2]");
  const Status valid = s.validate("sample");
  REQUIRE(valid.ok(), op, valid.message());
  Tensor* t = make(DType::i32, {1, 1, 1, 1}, op, {candidates, recent, draw});
  t->set_param(kSampleParamTemperature, s.temperature);
  t->set_param(kSampleParamTopK, static_cast<int32_t>(s.top_k));
  t->set_param(kSampleParamTopP, s.top_p);
  t->set_param(kSampleParamMinP, s.min_p);
  t->set_param(kSampleParamRepeatPenalty, s.repeat_penalty);
  t->set_param(kSampleParamNVocab, static_cast<int32_t>(n_vocab));
  return t;
}

Tensor* Context::rms_norm(Tensor* a, float eps) {
  Tensor* t = unary(Op::rms_norm, a);
  t->set_param(0, eps);
  return t;
}

Tensor* Context::norm(Tensor* a, float eps) {
  Tensor* t = unary(Op::norm, a);
  t->set_param(0, eps);
  return t;
}

Tensor* Context::rope(Tensor* x, Tensor* positions, const RopeParams& p, Tensor* freq_factors) {
  const Op op = Op::rope;
  require_type(x, DType::f32, op, "x");
  require_type(positions, DType::i32, op, "positions");
  const auto shapes = [&] { return "x " + describe(*x) + " and positions " + describe(*positions); };
  REQUIRE(x->ne[3] == 1, op, shapes() + ": x must be [head_dim, heads, tokens, 1]");
  REQUIRE(positions->nelements() == x->ne[2] && positions->ne[0] == x->ne[2], op,
          shapes() + ": one position per token (positions.ne[0] == x.ne[2])");
  REQUIRE(p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= x->ne[0], op,
          shapes() + ": n_dims " + std::to_string(p.n_dims) + " must be even and in (0, head_dim]");
  REQUIRE(p.mode == kRopeNormal || p.mode == kRopeNeox, op,
          "mode " + std::to_string(p.mode) + " is neither normal (0) nor neox (2)");
  // Written so that NaN fails them too.
  REQUIRE(std::isfinite(p.freq_base) && p.freq_base > 0.0f && std::isfinite(p.freq_scale) && p.freq_scale > 0.0f, op,
          "freq_base " + std::to_string(p.freq_base) + " and freq_scale " + std::to_string(p.freq_scale) +
              " must be finite and positive");
  REQUIRE(p.ext_factor >= 0.0f && p.ext_factor <= 1.0f, op,
          "ext_factor " + std::to_string(p.ext_factor) + " is not in [0, 1]");
  REQUIRE(std::isfinite(p.attn_factor) && p.attn_factor > 0.0f, op,
          "attn_factor " + std::to_string(p.attn_factor) + " must be finite and positive");
  if (freq_factors != nullptr) {
    require_type(freq_factors, DType::f32, op, "freq_factors");
    REQUIRE(freq_factors->ne[0] == p.n_dims / 2 && freq_factors->nelements() == p.n_dims / 2, op,
            "freq_factors " + describe(*freq_factors) + " must be [n_dims/2] = [" + std::to_string(p.n_dims / 2) + "]");
  }
  // YaRN's ramp, in pairs: corr(n) is the pair that makes n turns over the
  // original context, n_dims · ln(n_ctx_orig / (2π n)) / (2 ln freq_base).
  float corr_low = 0.0f, corr_high = 0.0f;
  if (p.ext_factor > 0.0f) {
    REQUIRE(p.n_ctx_orig > 0, op, "YaRN needs n_ctx_orig > 0, not " + std::to_string(p.n_ctx_orig));
    REQUIRE(p.freq_base > 1.0f, op, "YaRN needs freq_base > 1, not " + std::to_string(p.freq_base));
    REQUIRE(std::isfinite(p.beta_fast) && p.beta_fast > 0.0f && std::isfinite(p.beta_slow) && p.beta_slow > 0.0f, op,
            "YaRN's beta_fast " + std::to_string(p.beta_fast) + " and beta_slow " + std::to_string(p.beta_slow) +
                " must be finite and positive");
    const auto corr = [&](double turns) {
      return p.n_dims * std::log(p.n_ctx_orig / (turns * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(static_cast<double>(p.freq_base)));
    };
    // Clamped to [0, n_dims - 1] at both ends: the ramp over the pairs
    // (all below n_dims / 2) is the same, and the range is what servers check.
    const double top = p.n_dims - 1;
    corr_low = static_cast<float>(std::clamp(std::floor(corr(p.beta_fast)), 0.0, top));
    corr_high = static_cast<float>(std::clamp(std::ceil(corr(p.beta_slow)), 0.0, top));
  }
  Tensor* t = freq_factors != nullptr ? make(DType::f32, x->ne, op, {x, positions, freq_factors})
                                      : make(DType::f32, x->ne, op, {x, positions});
  const bool yarn = p.ext_factor != 0.0f || p.attn_factor != 1.0f;
  t->set_param(kRopeParamNDims, static_cast<int32_t>(p.n_dims));
  t->set_param(kRopeParamMode, static_cast<int32_t>(p.mode | (yarn ? kRopeYarnBit : 0)));
  t->set_param(kRopeParamFreqBase, p.freq_base);
  t->set_param(kRopeParamFreqScale, p.freq_scale);
  if (yarn) {
    t->set_param(kRopeParamExtFactor, p.ext_factor);
    t->set_param(kRopeParamAttnFactor, p.attn_factor);
    t->set_param(kRopeParamCorrLow, corr_low);
    t->set_param(kRopeParamCorrHigh, corr_high);
  }
  return t;
}

Tensor* Context::rope(Tensor* x, Tensor* positions, int n_dims, int mode, float freq_base, float freq_scale) {
  RopeParams p;
  p.n_dims = n_dims;
  p.mode = mode;
  p.freq_base = freq_base;
  p.freq_scale = freq_scale;
  return rope(x, positions, p);
}

Tensor* Context::soft_max(Tensor* a, Tensor* mask, float scale, Tensor* sinks) {
  const Op op = Op::soft_max;
  require_type(a, DType::f32, op, "a");
  if (mask) {
    require_type(mask, DType::f32, op, "mask");
    REQUIRE(mask->ne[0] == a->ne[0] && mask->ne[1] >= a->ne[1] && mask->ne[2] == 1 && mask->ne[3] == 1, op,
            "a " + describe(*a) + " and mask " + describe(*mask) + ": mask must be [a.ne[0], >= a.ne[1]]");
  }
  if (sinks) {
    require_type(sinks, DType::f32, op, "sinks");
    REQUIRE(sinks->ne[0] == a->ne[2] && sinks->nelements() == sinks->ne[0] && sinks->rows_are_contiguous(), op,
            "a " + describe(*a) + " and sinks " + describe(*sinks) + ": sinks must be contiguous [a.ne[2]]");
  }
  Tensor* t = make(DType::f32, a->ne, op, {a, mask, sinks});
  t->set_param(0, scale);
  return t;
}

Tensor* Context::diag_mask_inf(Tensor* a, int n_past) {
  const Op op = Op::diag_mask_inf;
  REQUIRE(n_past >= 0, op, "n_past " + std::to_string(n_past) + " is negative");
  Tensor* t = unary(op, a);
  t->set_param(0, static_cast<int32_t>(n_past));
  return t;
}

Tensor* Context::cpy(Tensor* a, Tensor* b) {
  const Op op = Op::cpy;
  require_present(a, op, "a");
  require_present(b, op, "b");
  const auto shapes = [&] { return "a " + describe(*a) + " into b " + describe(*b); };
  REQUIRE(a->nelements() == b->nelements(), op, shapes() + ": element counts differ");
  REQUIRE((a->type == DType::i32) == (b->type == DType::i32), op, shapes() + ": i32 copies only to i32");
  REQUIRE(!is_quantized(b->type) || b->rows_are_contiguous(), op, shapes() + ": quantized rows must be contiguous");
  REQUIRE(!is_quantized(a->type) || a->rows_are_contiguous(), op, shapes() + ": quantized rows must be contiguous");
  REQUIRE(!is_quantized(a->type) || !is_quantized(b->type) || a->ne[0] == b->ne[0], op,
          shapes() + ": quantized to quantized copies keep the row length");
  REQUIRE(!is_quantized(a->type) || is_quantized(b->type) || a->ne[0] == b->ne[0] || b->is_contiguous(), op,
          shapes() + ": a quantized source needs the same row length or a contiguous destination");
  REQUIRE(!is_quantized(b->type) || is_quantized(a->type) || a->ne[0] == b->ne[0] || a->is_contiguous(), op,
          shapes() + ": a quantized destination needs the same row length or a contiguous source");
  Tensor* t = make_view(b, op);
  t->src[0] = a;
  t->src[1] = nullptr;
  return t;
}

Tensor* Context::cont(Tensor* a) {
  require_present(a, Op::cpy, "a");
  return cast(a, a->type);
}

Tensor* Context::cast(Tensor* a, DType type) {
  const Op op = Op::cpy;
  require_present(a, op, "a");
  REQUIRE(a->ne[0] % block_size(type) == 0, op,
          "a " + describe(*a) + " cannot become " + name_of(type) + ": ne[0] must be divisible by " +
              std::to_string(block_size(type)));
  REQUIRE((a->type == DType::i32) == (type == DType::i32), op, "a " + describe(*a) + ": i32 converts only to i32");
  REQUIRE(!is_quantized(a->type) || a->rows_are_contiguous(), op,
          "a " + describe(*a) + ": quantized rows must be contiguous");
  return make(type, a->ne, op, {a});
}

Tensor* Context::set_rows(Tensor* dst, Tensor* src, Tensor* rows) {
  const Op op = Op::set_rows;
  require_present(dst, op, "dst");
  require_type(src, DType::f32, op, "src");
  require_type(rows, DType::i32, op, "rows");
  const auto shapes = [&] {
    return "dst " + describe(*dst) + ", src " + describe(*src) + " and rows " + describe(*rows);
  };
  REQUIRE(dst->type != DType::i32, op, shapes() + ": dst must be a float or quantized type");
  REQUIRE(dst->ne[2] == 1 && dst->ne[3] == 1 && src->ne[2] == 1 && src->ne[3] == 1, op,
          shapes() + ": dst is [K, R] and src [K, n]");
  REQUIRE(src->ne[0] == dst->ne[0], op, shapes() + ": rows must have the same length");
  REQUIRE(rows->ne[0] == src->ne[1] && rows->nelements() == rows->ne[0], op, shapes() + ": one row index per src row");
  // A float dst may be a strided view (a transposed cache takes one column per row of src).
  REQUIRE(dst->rows_are_contiguous() || !is_quantized(dst->type), op,
          shapes() + ": rows of a quantized dst must be contiguous");
  Tensor* t = make_view(dst, op);
  t->src[0] = src;
  t->src[1] = rows;
  return t;
}

Tensor* Context::concat(Tensor* a, Tensor* b, int dim) {
  const Op op = Op::concat;
  require_present(a, op, "a");
  require_present(b, op, "b");
  const auto shapes = [&] { return "a " + describe(*a) + " and b " + describe(*b); };
  REQUIRE(dim >= 0 && dim < kMaxDims, op, "dim " + std::to_string(dim) + " is not in [0, 4)");
  REQUIRE(a->type == b->type && (a->type == DType::f32 || a->type == DType::i32), op,
          shapes() + ": both must be f32 or both i32");
  std::array<int64_t, kMaxDims> ne = a->ne;
  for (int i = 0; i < kMaxDims; ++i) {
    if (i != dim)
      REQUIRE(a->ne[i] == b->ne[i], op, shapes() + ": dims other than " + std::to_string(dim) + " must match");
  }
  ne[dim] += b->ne[dim];
  Tensor* t = make(a->type, ne, op, {a, b});
  t->set_param(0, static_cast<int32_t>(dim));
  return t;
}

#undef REQUIRE

}  // namespace tensorpc
