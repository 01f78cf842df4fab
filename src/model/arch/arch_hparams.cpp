// Hyper-parameters from GGUF keys (see arch_hparams.h).
#include "model/arch/arch_hparams.h"

#include <cmath>

namespace tensorpc {
namespace {

// The keys under an architecture's prefix that tensorpc knows. Any other key
// there refuses the file.
constexpr std::string_view kKnownKeys[] = {
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "vocab_size",  // the embedding's rows say it
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.sliding_window",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scale_linear",  // the older name of a linear factor
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.finetuned",  // how the model was trained: the math is the same
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_ext_factor",
    "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_log_multiplier",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_feed_forward_length",
    "pooling_type",
};

// The keys of one architecture's prefix, and the errors that name them.
class ArchKeys {
 public:
  ArchKeys(const GgufFile& f, const ArchDescription& arch) : f_(f), arch_(arch), prefix_(std::string(arch.name) + ".") {}

  std::string key(std::string_view name) const { return prefix_ + std::string(name); }
  bool has(std::string_view name) const { return f_.has(key(name)); }

  StatusOr<int64_t> required(std::string_view name) const {
    auto v = f_.get_u64(key(name));
    if (!v.ok()) return context(v.status(), name);
    return static_cast<int64_t>(v.value());
  }
  StatusOr<int64_t> integer(std::string_view name, int64_t fallback) const {
    auto v = f_.get_u64(key(name), static_cast<uint64_t>(fallback));
    if (!v.ok()) return context(v.status(), name);
    return static_cast<int64_t>(v.value());
  }
  StatusOr<float> real(std::string_view name, float fallback) const {
    auto v = f_.get_f32(key(name), fallback);
    if (!v.ok()) return context(v.status(), name);
    return v.value();
  }
  StatusOr<std::string> text(std::string_view name, std::string fallback) const {
    auto v = f_.get_string(key(name), std::move(fallback));
    if (!v.ok()) return context(v.status(), name);
    return v.value();
  }

  // A key whose value asks for what tensorpc does not run.
  Status refuse(std::string_view name, const std::string& value, const std::string& why) const {
    return unsupported(std::string(arch_.name) + " model: " + key(name) + " is " + value + ": " + why);
  }
  // The first key under the prefix that kKnownKeys lacks.
  Status check_all_known() const {
    for (const GgufKeyInfo& k : f_.keys()) {
      if (k.name.compare(0, prefix_.size(), prefix_) != 0) continue;
      const std::string_view rest = std::string_view(k.name).substr(prefix_.size());
      bool known = false;
      for (std::string_view want : kKnownKeys) known = known || rest == want;
      if (!known) {
        return unsupported(std::string(arch_.name) + " model: key " + k.name +
                           " is not one tensorpc implements, and it may change the forward pass");
      }
    }
    return Status();
  }

 private:
  Status context(const Status& s, std::string_view name) const {
    return s.with_context(std::string(arch_.name) + " model: key " + key(name));
  }
  const GgufFile& f_;
  const ArchDescription& arch_;
  std::string prefix_;
};

std::string number(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// rope.scaling.*: none, linear or YaRN, each exactly; anything else refused.
Status read_rope_scaling(const ArchKeys& keys, LlamaHparams& hp) {
  const std::string factor_key = keys.has("rope.scaling.factor") ? "rope.scaling.factor" : "rope.scale_linear";
  TENSORPC_ASSIGN_OR_RETURN(const float factor, keys.real(factor_key, 1.0f));
  // A factor without a type is linear (what older files mean by it).
  TENSORPC_ASSIGN_OR_RETURN(const std::string t, keys.text("rope.scaling.type", factor != 1.0f ? "linear" : "none"));
  if (t != "none" && t != "linear" && t != "yarn") {
    return keys.refuse("rope.scaling.type", "'" + t + "'",
                       "tensorpc implements the RoPE scalings none, linear and yarn only");
  }
  if (!(factor > 0.0f) || !std::isfinite(factor)) {
    return keys.refuse(factor_key, number(factor), "a RoPE scaling factor must be positive");
  }
  if (t == "none") {
    if (factor != 1.0f) {
      return keys.refuse(factor_key, number(factor), "rope.scaling.type is none, so the factor must be 1");
    }
    return Status();
  }
  hp.rope_freq_scale = 1.0f / factor;
  if (t == "linear") return Status();

  // YaRN: ramp between interpolation and extrapolation over the wavelengths
  // of the original context, and magnify by (1 + 0.1 ln factor) · attn_factor.
  auto orig = keys.integer("rope.scaling.original_context_length", hp.n_ctx_train);
  auto ext = keys.real("rope.scaling.yarn_ext_factor", 1.0f);
  auto attn = keys.real("rope.scaling.yarn_attn_factor", 1.0f);
  auto fast = keys.real("rope.scaling.yarn_beta_fast", 32.0f);
  auto slow = keys.real("rope.scaling.yarn_beta_slow", 1.0f);
  auto log_mul = keys.real("rope.scaling.yarn_log_multiplier", 0.0f);
  for (const Status& s : {orig.status(), ext.status(), attn.status(), fast.status(), slow.status(), log_mul.status()}) {
    TENSORPC_RETURN_IF_ERROR(s);
  }
  if (log_mul.value() != 0.0f) {
    return keys.refuse("rope.scaling.yarn_log_multiplier", number(log_mul.value()),
                       "a YaRN magnitude with its own log multiplier is not implemented");
  }
  if (orig.value() <= 0) {
    return keys.refuse("rope.scaling.original_context_length", std::to_string(orig.value()), "must be positive");
  }
  hp.rope_n_ctx_orig = orig.value();
  hp.yarn_ext_factor = ext.value();
  hp.yarn_attn_factor = attn.value();
  hp.yarn_beta_fast = fast.value();
  hp.yarn_beta_slow = slow.value();
  return Status();
}

// Keys that are harmless at their neutral value and change the math otherwise.
Status check_neutral_keys(const ArchKeys& keys) {
  TENSORPC_ASSIGN_OR_RETURN(const float attn_factor, keys.real("rope.scaling.attn_factor", 1.0f));
  if (attn_factor != 1.0f) {
    return keys.refuse("rope.scaling.attn_factor", number(attn_factor),
                       "a RoPE magnitude outside YaRN is not implemented");
  }
  return Status();
}

// Mixture of experts: how many, how many a token uses, their width.
Status read_experts(const ArchKeys& keys, const ArchDescription& arch, LlamaHparams& hp) {
  TENSORPC_ASSIGN_OR_RETURN(hp.n_expert, keys.integer("expert_count", 0));
  if (hp.n_expert > 0 && arch.experts == Experts::none) {
    return keys.refuse("expert_count", std::to_string(hp.n_expert),
                       std::string("tensorpc runs ") + std::string(arch.name) + " without experts");
  }
  if (hp.n_expert == 0) {
    if (arch.experts == Experts::always) {
      return keys.refuse("expert_count", "missing or 0", "a " + std::string(arch.name) + " model has experts");
    }
    for (const char* name : {"expert_used_count", "expert_feed_forward_length", "expert_shared_feed_forward_length"}) {
      if (keys.has(name)) return keys.refuse(name, "set", "the model has no experts (expert_count is 0)");
    }
    return Status();
  }
  // Mixtral's experts are feed_forward_length wide; the others say so apart.
  TENSORPC_ASSIGN_OR_RETURN(hp.n_expert_used, keys.required("expert_used_count"));
  TENSORPC_ASSIGN_OR_RETURN(hp.n_ff_exp, keys.integer("expert_feed_forward_length", hp.n_ff));
  if (arch.shared_expert) {
    TENSORPC_ASSIGN_OR_RETURN(hp.n_ff_shexp, keys.integer("expert_shared_feed_forward_length", hp.n_ff));
  } else if (keys.has("expert_shared_feed_forward_length")) {
    return keys.refuse("expert_shared_feed_forward_length", "set",
                       std::string("tensorpc runs ") + std::string(arch.name) + " without a shared expert");
  }
  return Status();
}

}  // namespace

Status read_arch_hparams(const GgufFile& f, const ArchDescription& arch, LlamaHparams& hp) {
  const ArchKeys keys(f, arch);
  TENSORPC_RETURN_IF_ERROR(keys.check_all_known());
  TENSORPC_RETURN_IF_ERROR(check_neutral_keys(keys));
  hp.arch = &arch;

  auto embd = keys.required("embedding_length");
  auto layers = keys.required("block_count");
  // A mixture of experts needs no dense width: its experts' is the fallback.
  auto ff = keys.has("feed_forward_length") || !keys.has("expert_feed_forward_length")
                ? keys.required("feed_forward_length")
                : keys.required("expert_feed_forward_length");
  auto heads = keys.required("attention.head_count");
  for (auto* v : {&embd, &layers, &ff, &heads}) {
    if (!v->ok()) return v->status();
  }
  hp.n_embd = embd.value();
  hp.n_layer = layers.value();
  hp.n_ff = ff.value();
  hp.n_head = heads.value();
  TENSORPC_RETURN_IF_ERROR(read_experts(keys, arch, hp));

  // The head dim: key_length where the file gives it (gemma, qwen3: it need
  // not be n_embd / n_head); keys and values of one size.
  const int64_t plain_head = hp.n_head > 0 ? hp.n_embd / hp.n_head : 0;
  TENSORPC_ASSIGN_OR_RETURN(const int64_t key_length, keys.integer("attention.key_length", plain_head));
  TENSORPC_ASSIGN_OR_RETURN(const int64_t value_length, keys.integer("attention.value_length", plain_head));
  if (key_length != value_length) {
    return keys.refuse("attention.value_length", std::to_string(value_length),
                       "values of another size than the keys (" + keys.key("attention.key_length") + " " +
                           std::to_string(key_length) + ") are not implemented");
  }
  if (keys.has("attention.key_length") && key_length != plain_head) hp.n_head_dim = key_length;

  auto heads_kv = keys.integer("attention.head_count_kv", hp.n_head);
  auto ctx = keys.integer("context_length", 2048);
  auto rot = keys.integer("rope.dimension_count", hp.head_dim());
  auto base = keys.real("rope.freq_base", 10000.0f);
  auto eps = keys.real("attention.layer_norm_rms_epsilon", 1e-5f);
  for (const Status& s : {heads_kv.status(), ctx.status(), rot.status(), base.status(), eps.status()}) {
    TENSORPC_RETURN_IF_ERROR(s);
  }
  hp.n_head_kv = heads_kv.value();
  hp.n_ctx_train = ctx.value();
  hp.n_rot = rot.value();
  hp.rope_freq_base = base.value();
  hp.norm_eps = eps.value();
  TENSORPC_RETURN_IF_ERROR(read_rope_scaling(keys, hp));

  // Sliding window: the layers the description names attend to the last
  // n_swa positions (gemma2 trained with 4096 when the file does not say).
  TENSORPC_ASSIGN_OR_RETURN(const int64_t window,
                            keys.integer("attention.sliding_window", arch.sliding == SlidingLayers::even ? 4096 : 0));
  if (window > 0 && arch.sliding == SlidingLayers::refused) {
    return keys.refuse("attention.sliding_window", std::to_string(window),
                       std::string("tensorpc runs ") + std::string(arch.name) + " without a sliding window");
  }
  hp.n_swa = window;

  // Soft-caps (gemma2: 50 and 30 unless the file says otherwise).
  if (arch.logit_softcaps) {
    TENSORPC_ASSIGN_OR_RETURN(hp.attn_softcap, keys.real("attn_logit_softcapping", 50.0f));
    TENSORPC_ASSIGN_OR_RETURN(hp.final_softcap, keys.real("final_logit_softcapping", 30.0f));
  } else {
    for (const char* name : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      if (keys.has(name)) {
        return keys.refuse(name, "set", std::string("tensorpc runs ") + std::string(arch.name) + " without soft-caps");
      }
    }
  }

  // Embeddings' pooling (GGUF's numbering: 0 none, 1 mean, 2 cls, 3 last);
  // rank (4) scores a pair of texts, which tensorpc does not do.
  TENSORPC_ASSIGN_OR_RETURN(const int64_t pooling, keys.integer("pooling_type", 1));
  if (pooling < 0 || pooling > 3) {
    return keys.refuse("pooling_type", std::to_string(pooling), "tensorpc pools by none, mean, cls or last (0 to 3)");
  }
  hp.pooling = static_cast<Pooling>(pooling);

  // The query scale.
  if (arch.query_scale == QueryScale::gemma2 && hp.n_layer == 46 && hp.n_head > 0) {
    hp.attn_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head));
  }
  return Status();
}

}  // namespace tensorpc
