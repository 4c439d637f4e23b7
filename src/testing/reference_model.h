// A plain, slow, double-precision Qwen3 / Qwen3-MoE training loss, written
// from the model's definition (docs/reference.md §8) and independent of model.cc and the
// kernels: the reference of the whole-model gradient check (header-only,
// tests only).
//
//   x = embed[tokens]
//   per layer:  h = rmsnorm(x, input_layernorm)
//               q, k, v = h Wq^T, h Wk^T, h Wv^T           (W[out, in] row-major)
//               q, k = rmsnorm per head over head_dim (q_norm, k_norm), then RoPE
//                      (rotate_half, inv_freq_i = 1/theta^(2i/hd), angle pos*inv_freq_i)
//               a = causal GQA softmax(q k^T / sqrt(hd)) v, per sequence
//               x = x + a Wo^T
//               h = rmsnorm(x, post_attention_layernorm)
//               x = x + down(silu(gate(h)) * up(h))                          (dense)
//                 | x + sum_{e in topk(softmax(h Wr^T))} w_e * expert_e(h)     (MoE)
//   logits = rmsnorm(x, norm) lm_head^T   (lm_head = embed when tied)
//   ce  = -(1/T) sum over targets of log_softmax(logits[i-1])[tokens[i]]
//   aux = coef * E * sum_e (count_e / R) * (psum_e / R), R = rows * MoE layers
//   loss = ce + aux
//
// Parameters: the ParamTable's storage converted to double, in its layout;
// weights() may be changed in place (one coordinate at a time, for finite
// differences). prepare() caches the residual stream at every layer boundary
// so that perturbing a coordinate of layer l re-runs only layers l.. .
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "learner/learner.h"
#include "model/params.h"

namespace mxrl::test {

struct RefResult {
  double ce = 0;    // mean cross-entropy over the targets
  double aux = 0;   // the load-balancing loss, coef included (0 when coef == 0)
  double loss = 0;  // ce + aux
  // The expert choices of every MoE row (layer-major, then row, then rank):
  // finite differences are valid only where these do not change.
  std::vector<int32_t> routing;
  // The smallest gap between the k-th and (k+1)-th router probability of any
  // MoE row (infinity when no MoE layer or k == E): how near a routing tie.
  double min_margin = std::numeric_limits<double>::infinity();
  // Rows routed to each expert, [moe layer][expert].
  std::vector<std::vector<int64_t>> expert_rows;
};

class ReferenceModel {
 public:
  explicit ReferenceModel(const ParamTable& p)
      : cfg_(p.config()), entries_(p.entries()), w_(p.storage().begin(), p.storage().end()) {
    embed_ = p.embed(), final_norm_ = p.final_norm(), lm_head_ = p.lm_head();
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) layers_.push_back(p.layer(l));
  }

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& entries() const { return entries_; }
  std::vector<double>& weights() { return w_; }
  const std::vector<double>& weights() const { return w_; }

  // The full loss of `batch` with the current weights (no caching).
  RefResult evaluate(const std::vector<Sequence>& batch, double aux_coef) const {
    State s = start(batch);
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) run_layer(l, s);
    return finish(s, aux_coef);
  }

  // Evaluates `batch` and caches every layer boundary for perturbed().
  RefResult prepare(const std::vector<Sequence>& batch, double aux_coef) {
    aux_coef_ = aux_coef;
    cache_.clear();
    State s = start(batch);
    cache_.push_back(s);
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      run_layer(l, s);
      cache_.push_back(s);
    }
    return finish(s, aux_coef);
  }

  // The loss with weights()[coord] += delta (restored afterwards), re-running
  // only what the coordinate's tensor feeds. Needs prepare() and unchanged
  // other weights.
  RefResult perturbed(int64_t coord, double delta) {
    if (cache_.empty()) throw std::logic_error("ReferenceModel::perturbed before prepare");
    const int t = tensor_of(coord);
    const double saved = w_[coord];
    w_[coord] = saved + delta;
    int64_t first = entries_[t].layer;  // the first layer to re-run
    if (t == embed_)
      first = 0;
    else if (first < 0)
      first = cfg_.num_hidden_layers;  // final norm, lm_head
    State s = t == embed_ ? start_from(cache_[0]) : cache_[first];
    for (int64_t l = first; l < cfg_.num_hidden_layers; ++l) run_layer(l, s);
    RefResult r = finish(s, aux_coef_);
    w_[coord] = saved;
    return r;
  }

  // The parameter-table index of a storage coordinate.
  int tensor_of(int64_t coord) const {
    for (size_t i = 0; i < entries_.size(); ++i)
      if (coord >= entries_[i].offset && coord < entries_[i].offset + entries_[i].numel) return static_cast<int>(i);
    throw std::out_of_range("ReferenceModel: coordinate outside the storage");
  }

 private:
  // The batch flattened into rows, and the state between layers.
  struct State {
    std::vector<int32_t> tokens;
    std::vector<int64_t> pos;
    std::vector<std::pair<int64_t, int64_t>> seqs;  // (first row, length)
    std::vector<uint8_t> target;                    // per row: its token is a target
    std::vector<double> x;                          // residual stream [n, H]
    // MoE statistics of the layers run so far.
    std::vector<double> count, psum;
    int64_t moe_layers = 0;
    std::vector<int32_t> routing;
    double min_margin = std::numeric_limits<double>::infinity();
    std::vector<std::vector<int64_t>> expert_rows;
    int64_t n() const { return static_cast<int64_t>(tokens.size()); }
  };

  const double* W(int index) const { return w_.data() + entries_[index].offset; }

  static double dot(const double* a, const double* b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2], s3 += a[i + 3] * b[i + 3];
    for (; i < n; ++i) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
  }
  // y[m, out] = x[m, in] W^T, W[out, in].
  static void linear(const double* w, const double* x, int64_t m, int64_t out, int64_t in, double* y) {
    for (int64_t r = 0; r < m; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] = dot(x + r * in, w + o * in, in);
  }
  void rmsnorm(double* y, const double* x, const double* w, int64_t rows, int64_t dim) const {
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = x + r * dim;
      double ss = 0;
      for (int64_t d = 0; d < dim; ++d) ss += xr[d] * xr[d];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + cfg_.rms_norm_eps);
      for (int64_t d = 0; d < dim; ++d) y[r * dim + d] = xr[d] * inv * w[d];
    }
  }
  static double silu(double g) { return g / (1.0 + std::exp(-g)); }
  static void softmax(double* x, int64_t n) {
    const double mx = *std::max_element(x, x + n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (x[i] = std::exp(x[i] - mx));
    for (int64_t i = 0; i < n; ++i) x[i] /= s;
  }
  // y[H] += scale * down(silu(gate(x)) * up(x)) for one row x[H].
  void swiglu_mlp(int gi, int ui, int di, const double* x, double scale, double* y) const {
    const int64_t H = cfg_.hidden_size, F = entries_[gi].shape[0];
    std::vector<double> g(F), u(F);
    linear(W(gi), x, 1, F, H, g.data());
    linear(W(ui), x, 1, F, H, u.data());
    for (int64_t f = 0; f < F; ++f) g[f] = silu(g[f]) * u[f];
    const double* wd = W(di);
    for (int64_t d = 0; d < H; ++d) y[d] += scale * dot(g.data(), wd + d * F, F);
  }

  State start(const std::vector<Sequence>& batch) const {
    State s;
    for (const Sequence& q : batch) {
      if (q.tokens.empty() || q.target.size() != q.tokens.size() || q.target[0])
        throw std::invalid_argument("reference: malformed sequence");
      s.seqs.push_back({s.n(), static_cast<int64_t>(q.tokens.size())});
      for (size_t p = 0; p < q.tokens.size(); ++p) {
        s.tokens.push_back(q.tokens[p]);
        s.pos.push_back(static_cast<int64_t>(p));
        s.target.push_back(q.target[p]);
      }
    }
    return start_from(s);
  }
  // The embedding of `s`'s rows, with its layout kept and the statistics reset.
  State start_from(const State& layout) const {
    State s;
    s.tokens = layout.tokens, s.pos = layout.pos, s.seqs = layout.seqs, s.target = layout.target;
    const int64_t n = s.n(), H = cfg_.hidden_size;
    s.x.resize(n * H);
    for (int64_t i = 0; i < n; ++i) {
      if (s.tokens[i] < 0 || s.tokens[i] >= cfg_.vocab_size) throw std::out_of_range("reference: token id");
      std::copy(W(embed_) + s.tokens[i] * H, W(embed_) + (s.tokens[i] + 1) * H, &s.x[i * H]);
    }
    s.count.assign(cfg_.num_experts, 0.0), s.psum.assign(cfg_.num_experts, 0.0);
    return s;
  }

  void run_layer(int64_t l, State& s) const {
    const ModelConfig& c = cfg_;
    const LayerIndex& li = layers_[l];
    const int64_t n = s.n(), H = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads,
                  nkv = c.num_key_value_heads, qd = nq * hd, kvd = nkv * hd, half = hd / 2;
    std::vector<double> h(n * H), q(n * qd), k(n * kvd), v(n * kvd), att(n * qd, 0.0), y(n * H);
    // Attention block.
    rmsnorm(h.data(), s.x.data(), W(li.input_norm), n, H);
    linear(W(li.q), h.data(), n, qd, H, q.data());
    linear(W(li.k), h.data(), n, kvd, H, k.data());
    linear(W(li.v), h.data(), n, kvd, H, v.data());
    rmsnorm(q.data(), q.data(), W(li.q_norm), n * nq, hd);
    rmsnorm(k.data(), k.data(), W(li.k_norm), n * nkv, hd);
    auto rope = [&](double* x, int64_t heads, int64_t pos) {
      for (int64_t hh = 0; hh < heads; ++hh) {
        double* xh = x + hh * hd;
        for (int64_t i = 0; i < half; ++i) {
          const double inv_freq = 1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(hd));
          const double a = static_cast<double>(pos) * inv_freq, cs = std::cos(a), sn = std::sin(a);
          const double x1 = xh[i], x2 = xh[i + half];
          xh[i] = x1 * cs - x2 * sn;
          xh[i + half] = x2 * cs + x1 * sn;
        }
      }
    };
    for (int64_t i = 0; i < n; ++i) rope(&q[i * qd], nq, s.pos[i]), rope(&k[i * kvd], nkv, s.pos[i]);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const int64_t group = nq / nkv;
    std::vector<double> sc;
    for (const auto& [first, len] : s.seqs)
      for (int64_t p = 0; p < len; ++p) {
        const int64_t i = first + p;
        sc.resize(p + 1);
        for (int64_t hh = 0; hh < nq; ++hh) {
          const int64_t kh = hh / group;
          for (int64_t j = 0; j <= p; ++j)
            sc[j] = dot(&q[i * qd + hh * hd], &k[(first + j) * kvd + kh * hd], hd) * scale;
          softmax(sc.data(), p + 1);
          for (int64_t j = 0; j <= p; ++j)
            for (int64_t d = 0; d < hd; ++d) att[i * qd + hh * hd + d] += sc[j] * v[(first + j) * kvd + kh * hd + d];
        }
      }
    linear(W(li.o), att.data(), n, H, qd, y.data());
    for (int64_t i = 0; i < n * H; ++i) s.x[i] += y[i];
    // MLP block.
    rmsnorm(h.data(), s.x.data(), W(li.post_norm), n, H);
    std::fill(y.begin(), y.end(), 0.0);
    if (li.router < 0) {
      for (int64_t i = 0; i < n; ++i) swiglu_mlp(li.gate, li.up, li.down, &h[i * H], 1.0, &y[i * H]);
    } else {
      const int64_t E = c.num_experts, K = c.num_experts_per_tok;
      std::vector<double> p(E);
      std::vector<int> order(E);
      std::vector<int64_t> rows(E, 0);
      for (int64_t i = 0; i < n; ++i) {
        linear(W(li.router), &h[i * H], 1, E, H, p.data());
        softmax(p.data(), E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
        if (K < E) s.min_margin = std::min(s.min_margin, p[order[K - 1]] - p[order[K]]);
        double sum = 0;
        for (int64_t j = 0; j < K; ++j) sum += p[order[j]];
        for (int64_t e = 0; e < E; ++e) s.psum[e] += p[e];
        for (int64_t j = 0; j < K; ++j) {
          const int e = order[j];
          const double wt = c.norm_topk_prob ? p[e] / sum : p[e];
          s.count[e] += 1.0;
          ++rows[e];
          s.routing.push_back(e);
          swiglu_mlp(li.expert_gate[e], li.expert_up[e], li.expert_down[e], &h[i * H], wt, &y[i * H]);
        }
      }
      ++s.moe_layers;
      s.expert_rows.push_back(rows);
    }
    for (int64_t i = 0; i < n * H; ++i) s.x[i] += y[i];
  }

  RefResult finish(const State& s, double aux_coef) const {
    const ModelConfig& c = cfg_;
    const int64_t n = s.n(), H = c.hidden_size, V = c.vocab_size;
    std::vector<double> xn(H), logits(V);
    double ce = 0;
    int64_t targets = 0;
    for (const auto& [first, len] : s.seqs)
      for (int64_t p = 0; p + 1 < len; ++p) {
        if (!s.target[first + p + 1]) continue;
        rmsnorm(xn.data(), &s.x[(first + p) * H], W(final_norm_), 1, H);
        linear(W(lm_head_), xn.data(), 1, V, H, logits.data());
        const double mx = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (double v : logits) z += std::exp(v - mx);
        ce -= logits[s.tokens[first + p + 1]] - mx - std::log(z);
        ++targets;
      }
    RefResult r;
    r.ce = targets > 0 ? ce / static_cast<double>(targets) : 0.0;
    const double R = static_cast<double>(n * s.moe_layers);
    if (aux_coef != 0.0 && s.moe_layers > 0) {
      double a = 0;
      for (int64_t e = 0; e < c.num_experts; ++e) a += (s.count[e] / R) * (s.psum[e] / R);
      r.aux = aux_coef * static_cast<double>(c.num_experts) * a;
    }
    r.loss = r.ce + r.aux;
    r.routing = s.routing;
    r.min_margin = s.min_margin;
    r.expert_rows = s.expert_rows;
    return r;
  }

  ModelConfig cfg_;
  std::vector<ParamInfo> entries_;
  std::vector<LayerIndex> layers_;
  std::vector<double> w_;
  int embed_ = -1, final_norm_ = -1, lm_head_ = -1;
  double aux_coef_ = 0;
  std::vector<State> cache_;  // [layers + 1]: the state entering each layer, then the final one
};

// The reference loss (ce + aux) of `batch` under the parameters `p`, or under
// `override_storage` (a double copy of p's storage, in p's layout) when given.
inline double reference_loss(const ParamTable& p, const std::vector<Sequence>& batch, double aux_coef,
                             const std::vector<double>* override_storage = nullptr) {
  ReferenceModel m(p);
  if (override_storage) {
    if (override_storage->size() != m.weights().size()) throw std::invalid_argument("reference_loss: storage size");
    m.weights() = *override_storage;
  }
  return m.evaluate(batch, aux_coef).loss;
}

}  // namespace mxrl::test
