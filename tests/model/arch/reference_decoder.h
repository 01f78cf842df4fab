// The decoder forward pass written out with straight loops in double
// precision, one token at a time: the reference the graph of llama.cpp is
// checked against, for every architecture.
//
// It knows nothing of ArchDescription: each feature is a plain field of
// ReferenceConfig, set by the test from what it knows of the architecture,
// and written below as its math. So a description that says the wrong thing
// makes the graph and the reference disagree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tensorpc::reference {

using Mat = std::vector<double>;  // a matrix W stored [out][in] (a GGUF tensor [in, out]), or a vector

struct ReferenceConfig {
  int64_t n_vocab = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_rot = 0;
  double norm_eps = 1e-5;
  // RoPE: pairs (2i, 2i+1), or (i, i + n_rot/2) when neox.
  bool neox = false;
  double freq_base = 10000.0;
  std::vector<double> freq_factors;  // empty: all 1
  double freq_scale = 1.0;           // linear interpolation when < 1
  double ext_factor = 0.0;           // YaRN when > 0
  double attn_factor = 1.0;
  double beta_fast = 32.0, beta_slow = 1.0;
  int64_t n_ctx_orig = 0;

  bool embedding_scale = false;  // x = embedding * sqrt(n_embd)
  bool qkv_bias = false;
  bool qk_norm = false;
  bool post_norms = false;
  bool gelu = false;  // the gate's activation: GELU (tanh form) instead of SiLU
  double query_scale = 0.0;   // 0: 1/sqrt(head_dim)
  double attn_softcap = 0.0;  // 0: none
  double final_softcap = 0.0;
  int64_t window = 0;               // sliding window; 0: none
  bool window_even_layers = false;  // the window on layers 0, 2, … only (else on all)
  bool attn_output_bias = false;    // o = wo attn + bo
  bool sinks = false;               // each head's sink logit joins its softmax's denominator

  // Mixture of experts when n_expert > 0: the router's top n_expert_used
  // experts (each n_ff_exp wide) run, weighted by the softmax over their
  // logits, or (softmax_all) by their probabilities in the softmax over all.
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool softmax_all = false;
  bool expert_biases = false;  // the router's and each expert's biases
  int64_t n_ff_shexp = 0;      // > 0: a shared expert, gated by sigmoid(w · h)
  bool clamped = false;        // gpt-oss's activation: g = min(gate, 7), u = clamp(up, ±7), g σ(1.702 g) (u + 1)
};

// A layer's weights. Fused matrices are given split (the test splits the
// file's rows), so the reference reads the math, not the layout.
struct ReferenceLayer {
  Mat attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, bo, sinks, post_attn_norm;
  Mat ffn_norm, gate, up, down, post_ffn_norm;
  // experts: the router [n_expert][n_embd] and its bias; per expert e its
  // matrices and biases; the shared expert
  Mat router, router_b;
  std::vector<Mat> gate_e, up_e, down_e, gate_b, up_b, down_b;
  Mat shexp_gate_inp, shexp_gate, shexp_up, shexp_down;
};

class ReferenceDecoder {
 public:
  ReferenceConfig c;
  Mat embd, out_norm, out;  // embd, out: [n_vocab][n_embd]
  std::vector<ReferenceLayer> layers;

  // The logits after token `token` at position `pos`; every earlier position
  // must have been run before, in order.
  Mat forward(int token, int pos) {
    const int64_t E = c.n_embd, hd = c.head_dim, Q = c.n_head * hd, KV = c.n_head_kv * hd;
    kc.resize(layers.size());
    vc.resize(layers.size());
    Mat x(embd.begin() + token * E, embd.begin() + (token + 1) * E);
    if (c.embedding_scale) {
      for (double& v : x) v *= std::sqrt(static_cast<double>(E));
    }
    for (size_t l = 0; l < layers.size(); ++l) {
      const ReferenceLayer& L = layers[l];
      // q, k, v of the normalised input, biased, per-head normalised, rotated
      Mat h = rmsnorm(x, L.attn_norm);
      Mat q = matvec(L.wq, h, Q), k = matvec(L.wk, h, KV), v = matvec(L.wv, h, KV);
      if (c.qkv_bias) {
        for (int64_t i = 0; i < Q; ++i) q[i] += L.bq[i];
        for (int64_t i = 0; i < KV; ++i) k[i] += L.bk[i], v[i] += L.bv[i];
      }
      if (c.qk_norm) {
        head_rmsnorm(q, c.n_head, L.q_norm);
        head_rmsnorm(k, c.n_head_kv, L.k_norm);
      }
      rope(q, c.n_head, pos);
      rope(k, c.n_head_kv, pos);
      kc[l].resize(static_cast<size_t>((pos + 1) * KV));
      vc[l].resize(static_cast<size_t>((pos + 1) * KV));
      std::copy(k.begin(), k.end(), kc[l].begin() + pos * KV);
      std::copy(v.begin(), v.end(), vc[l].begin() + pos * KV);

      // attention over the positions this layer sees
      const bool windowed = c.window > 0 && (!c.window_even_layers || l % 2 == 0);
      const int first = windowed ? std::max(0, pos - static_cast<int>(c.window) + 1) : 0;
      const double scale = c.query_scale > 0 ? c.query_scale : 1.0 / std::sqrt(static_cast<double>(hd));
      Mat attn(static_cast<size_t>(Q), 0.0);
      for (int64_t hh = 0; hh < c.n_head; ++hh) {
        const int64_t g = hh / (c.n_head / c.n_head_kv);
        std::vector<double> s(static_cast<size_t>(pos + 1), 0.0);
        double mx = c.sinks ? L.sinks[hh] : -1e300;
        for (int j = first; j <= pos; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[hh * hd + i] * kc[l][j * KV + g * hd + i];
          s[j] = d * scale;
          if (c.attn_softcap > 0) s[j] = c.attn_softcap * std::tanh(s[j] / c.attn_softcap);
          mx = std::max(mx, s[j]);
        }
        double sum = c.sinks ? std::exp(L.sinks[hh] - mx) : 0.0;
        for (int j = first; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = first; j <= pos; ++j)
          for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += s[j] / sum * vc[l][j * KV + g * hd + i];
      }
      Mat o = matvec(L.wo, attn, E);
      if (c.attn_output_bias) add(o, L.bo);
      if (c.post_norms) o = rmsnorm(o, L.post_attn_norm);
      for (int64_t i = 0; i < E; ++i) x[i] += o[i];

      // the gated feed-forward
      h = rmsnorm(x, L.ffn_norm);
      Mat d = c.n_expert > 0 ? experts(L, h) : feed_forward(L.gate, L.up, L.down, h, c.n_ff);
      if (c.post_norms) d = rmsnorm(d, L.post_ffn_norm);
      for (int64_t i = 0; i < E; ++i) x[i] += d[i];
    }
    Mat logits = matvec(out, rmsnorm(x, out_norm), c.n_vocab);
    if (c.final_softcap > 0) {
      for (double& v : logits) v = c.final_softcap * std::tanh(v / c.final_softcap);
    }
    return logits;
  }

  // y[o] = sum_i W[o][i] x[i]
  static Mat matvec(const Mat& W, const Mat& x, int64_t out) {
    const auto in = static_cast<int64_t>(x.size());
    Mat y(static_cast<size_t>(out), 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += W[o * in + i] * x[i];
    return y;
  }

 private:
  static void add(Mat& y, const Mat& b) {
    for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
  }
  static double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  double act(double g, double u) const {
    if (c.clamped) {
      g = std::min(g, 7.0);
      u = std::min(std::max(u, -7.0), 7.0);
      return g * sigmoid(1.702 * g) * (u + 1.0);
    }
    return (c.gelu ? gelu(g) : g * sigmoid(g)) * u;
  }
  // down (act(gate h + gb) * (up h + ub)) + db; the biases when given
  Mat feed_forward(const Mat& gate, const Mat& up, const Mat& down, const Mat& h, int64_t width,
                   const Mat* gb = nullptr, const Mat* ub = nullptr, const Mat* db = nullptr) const {
    Mat a = matvec(gate, h, width), b = matvec(up, h, width);
    if (gb != nullptr) {
      add(a, *gb);
      add(b, *ub);
    }
    for (int64_t i = 0; i < width; ++i) a[i] = act(a[i], b[i]);
    Mat d = matvec(down, a, c.n_embd);
    if (db != nullptr) add(d, *db);
    return d;
  }
  Mat experts(const ReferenceLayer& L, const Mat& h) const {
    Mat logits = matvec(L.router, h, c.n_expert);
    if (c.expert_biases) add(logits, L.router_b);
    // the top n_expert_used, larger first, ties to the lower index
    std::vector<int64_t> order(static_cast<size_t>(c.n_expert));
    for (int64_t e = 0; e < c.n_expert; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    order.resize(static_cast<size_t>(c.n_expert_used));
    // weights: over all experts' logits, or over the chosen ones' only
    double mx = -1e300, sum = 0;
    for (int64_t e = 0; e < c.n_expert; ++e) mx = std::max(mx, logits[e]);
    if (c.softmax_all) {
      for (int64_t e = 0; e < c.n_expert; ++e) sum += std::exp(logits[e] - mx);
    } else {
      for (int64_t e : order) sum += std::exp(logits[e] - mx);
    }
    Mat out(static_cast<size_t>(c.n_embd), 0.0);
    for (int64_t e : order) {
      const Mat y = c.expert_biases ? feed_forward(L.gate_e[e], L.up_e[e], L.down_e[e], h, c.n_ff_exp, &L.gate_b[e],
                                                   &L.up_b[e], &L.down_b[e])
                                    : feed_forward(L.gate_e[e], L.up_e[e], L.down_e[e], h, c.n_ff_exp);
      const double w = std::exp(logits[e] - mx) / sum;
      for (int64_t i = 0; i < c.n_embd; ++i) out[i] += w * y[i];
    }
    if (c.n_ff_shexp > 0) {
      const Mat y = feed_forward(L.shexp_gate, L.shexp_up, L.shexp_down, h, c.n_ff_shexp);
      const double g = sigmoid(matvec(L.shexp_gate_inp, h, 1)[0]);
      for (int64_t i = 0; i < c.n_embd; ++i) out[i] += g * y[i];
    }
    return out;
  }
  Mat rmsnorm(const Mat& x, const Mat& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c.norm_eps);
    Mat y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * g[i];
    return y;
  }
  void head_rmsnorm(Mat& v, int64_t heads, const Mat& g) const {
    for (int64_t h = 0; h < heads; ++h) {
      const Mat one(v.begin() + h * c.head_dim, v.begin() + (h + 1) * c.head_dim);
      const Mat y = rmsnorm(one, g);
      std::copy(y.begin(), y.end(), v.begin() + h * c.head_dim);
    }
  }
  static double gelu(double x) {
    const double k = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
  }
  // YaRN's correction range: the dims whose wavelength over the original
  // context passes `rotations` turns, between beta_fast and beta_slow.
  double yarn_dim(double rotations) const {
    return c.n_rot * std::log(static_cast<double>(c.n_ctx_orig) / (rotations * 2 * M_PI)) / (2 * std::log(c.freq_base));
  }
  void rope(Mat& v, int64_t heads, int pos) const {
    const double low = std::max(0.0, std::floor(yarn_dim(c.beta_fast)));
    const double high = std::min(static_cast<double>(c.n_rot - 1), std::ceil(yarn_dim(c.beta_slow)));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < c.n_rot / 2; ++i) {
        const double f = c.freq_factors.empty() ? 1.0 : c.freq_factors[i];
        const double extrapolated = pos * std::pow(c.freq_base, -2.0 * i / c.n_rot) / f;
        const double interpolated = extrapolated * c.freq_scale;
        double theta = interpolated, magnitude = c.attn_factor;
        if (c.ext_factor > 0) {
          // ramp: 1 for the fast dims (below low), 0 for the slow ones (above high)
          const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
          const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * c.ext_factor;
          theta = interpolated * (1 - ramp) + extrapolated * ramp;
          magnitude *= 1.0 + 0.1 * std::log(1.0 / c.freq_scale);
        }
        const int64_t a = h * c.head_dim + (c.neox ? i : 2 * i);
        const int64_t b = h * c.head_dim + (c.neox ? i + c.n_rot / 2 : 2 * i + 1);
        const double x0 = v[a], x1 = v[b];
        v[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * magnitude;
        v[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * magnitude;
      }
  }

  std::vector<Mat> kc, vc;  // per layer: [pos][kv_dim]
};

}  // namespace tensorpc::reference
