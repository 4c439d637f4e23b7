#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "numerics/fp8_grid.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

Model::Model(const ParamTable& params, PrecisionPlan plan, const Exec& exec)
    : Model(params, std::move(plan),
            [&](int i, const ParamInfo& p, const LinearPrecision& prec) {
              return PreparedLinear::prepare(p.name, params.data(i), p.shape[0], p.shape[1], prec, exec);
            },
            [&](int i, const ParamInfo& p, float* dst) {
              const float* src = params.data(i);
              const bool bf16 = plan_.bf16_embeddings;
              if (bf16) bf16_round(src, p.numel, dst, exec);
              else std::copy(src, src + p.numel, dst);
            }) {}

Model Model::from_shipment(const ModelConfig& cfg, PrecisionPlan plan, const WeightShipment& s, const Exec& exec) {
  const ParamTable layout(cfg, /*allocate=*/false);
  size_t used_linears = 0, used_copies = 0;
  Model m(layout, std::move(plan),
          [&](int, const ParamInfo& p, const LinearPrecision& prec) {
            auto it = s.linears.find(p.name);
            if (it == s.linears.end()) fail("shipment: missing linear '{}'", p.name);
            const PreparedLinear& got = it->second;
            if (got.prec != prec)
              fail("shipment: '{}' arrived as {}, the plan computes it as {}", p.name, got.prec.str(), prec.str());
            if (got.n != p.shape[0] || got.k != p.shape[1])
              fail("shipment: '{}' arrived as [{}, {}], the model needs [{}, {}]", p.name, got.n, got.k, p.shape[0],
                   p.shape[1]);
            PreparedLinear L = got.payload();
            L.name = p.name;
            L.validate_and_pack(exec);
            ++used_linears;
            return L;
          },
          [&](int, const ParamInfo& p, float* dst) {
            auto it = s.copies.find(p.name);
            if (it == s.copies.end()) fail("shipment: missing tensor '{}'", p.name);
            if (static_cast<int64_t>(it->second.size()) != p.numel)
              fail("shipment: '{}' holds {} values, the model needs {}", p.name, it->second.size(), p.numel);
            std::memcpy(dst, it->second.data(), p.numel * sizeof(float));
            ++used_copies;
          });
  if (used_linears != s.linears.size() || used_copies != s.copies.size()) {
    for (const auto& [name, l] : s.linears)
      if (!layout.find(name) || (layout.find(name)->role != ParamRole::Linear && !(cfg.tie_word_embeddings && name == layout.entries()[layout.embed()].name)))
        fail("shipment: unexpected linear '{}'", name);
    for (const auto& [name, c] : s.copies)
      if (!layout.find(name) || layout.find(name)->role == ParamRole::Linear) fail("shipment: unexpected tensor '{}'", name);
    fail("shipment: {} linears and {} tensors shipped, {} and {} used", s.linears.size(), s.copies.size(),
         used_linears, used_copies);
  }
  return m;
}

WeightShipment Model::ship() const {
  WeightShipment s;
  for (const PreparedLinear* l : linears()) s.linears.emplace(l->name, l->payload());
  for (const NamedBuffer& b : compute_copies()) s.copies.emplace(b.name, std::vector<float>(b.data, b.data + b.numel));
  return s;
}

Model::Model(const ParamTable& params, PrecisionPlan plan, const LinearSource& linear, const CopySource& copy)
    : cfg_(params.config()), plan_(std::move(plan)) {
  // Compute copies of the non-linear parameters (embeddings, norms).
  std::vector<int64_t> off(params.entries().size(), -1);
  int64_t total = 0;
  for (size_t i = 0; i < params.entries().size(); ++i)
    if (params.entries()[i].role != ParamRole::Linear) off[i] = total, total += params.entries()[i].numel;
  compute_.resize(total);
  for (size_t i = 0; i < params.entries().size(); ++i) {
    const ParamInfo& p = params.entries()[i];
    param_names_.push_back(p.name);
    if (off[i] < 0) continue;
    copy(static_cast<int>(i), p, compute_.data() + off[i]);
    copies_.push_back({p.name, off[i], p.numel, p.shape});
  }
  embed_off_ = off[params.embed()];
  final_norm_off_ = off[params.final_norm()];
  auto lin = [&](int i) {
    const ParamInfo& p = params.entries()[i];
    return linear(i, p, plan_.for_param(p));
  };
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerIndex& li = params.layer(l);
    PreparedLayer L;
    L.input_norm = compute_.data() + off[li.input_norm];
    L.q_norm = compute_.data() + off[li.q_norm];
    L.k_norm = compute_.data() + off[li.k_norm];
    L.post_norm = compute_.data() + off[li.post_norm];
    L.q = lin(li.q), L.k = lin(li.k), L.v = lin(li.v), L.o = lin(li.o);
    L.moe = li.router >= 0;
    if (L.moe) {
      L.router = lin(li.router);
      for (size_t e = 0; e < li.expert_gate.size(); ++e) {
        L.expert_gate.push_back(lin(li.expert_gate[e]));
        L.expert_up.push_back(lin(li.expert_up[e]));
        L.expert_down.push_back(lin(li.expert_down[e]));
      }
    } else {
      L.gate = lin(li.gate), L.up = lin(li.up), L.down = lin(li.down);
    }
    layers_.push_back(std::move(L));
  }
  // The logits weight: lm_head, or the embedding when tied (under lm_head's precision).
  lm_head_ = linear(params.lm_head(), params.entries()[params.lm_head()], plan_.lm_head);
  rope_ = RopeTable::make(cfg_.head_dim, cfg_.rope_theta);
}

std::vector<const PreparedLinear*> Model::linears() const {
  std::vector<const PreparedLinear*> out;
  for (const PreparedLayer& L : layers_) {
    for (const PreparedLinear* p : {&L.q, &L.k, &L.v, &L.o}) out.push_back(p);
    if (L.moe) {
      out.push_back(&L.router);
      for (size_t e = 0; e < L.expert_gate.size(); ++e)
        for (const PreparedLinear* p : {&L.expert_gate[e], &L.expert_up[e], &L.expert_down[e]}) out.push_back(p);
    } else {
      for (const PreparedLinear* p : {&L.gate, &L.up, &L.down}) out.push_back(p);
    }
  }
  out.push_back(&lm_head_);
  return out;
}

std::vector<NamedBuffer> Model::compute_copies() const {
  std::vector<NamedBuffer> out;
  for (const CopyInfo& c : copies_) out.push_back({c.name, compute_.data() + c.offset, c.numel, c.shape});
  return out;
}

KvCache::KvCache(const ModelConfig& cfg) : layers_(cfg.num_hidden_layers), kv_dim_(cfg.kv_dim()) {}

int KvCache::add_sequence() {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  k_.emplace_back();
  v_.emplace_back();
  cap_.push_back(0);
  len_.push_back(0);
  return static_cast<int>(len_.size()) - 1;
}

void KvCache::reset(int slot) { len_[slot] = 0; }

void KvCache::release(int slot) {
  std::vector<float>().swap(k_[slot]);
  std::vector<float>().swap(v_[slot]);
  cap_[slot] = len_[slot] = 0;
  free_.push_back(slot);
}

void KvCache::reserve(int slot, int64_t n) {
  if (n <= cap_[slot]) return;
  int64_t cap = std::max<int64_t>(n, cap_[slot] * 2);
  for (auto* buf : {&k_[slot], &v_[slot]}) {
    std::vector<float> grown(layers_ * cap * kv_dim_);
    for (int64_t l = 0; l < layers_ && len_[slot] > 0; ++l)
      std::memcpy(&grown[l * cap * kv_dim_], buf->data() + l * cap_[slot] * kv_dim_,
                  len_[slot] * kv_dim_ * sizeof(float));
    *buf = std::move(grown);
  }
  cap_[slot] = cap;
}

namespace {
// Per-token work split over threads (each row independent).
template <typename F>
void per_token(const Exec& exec, int64_t n, F&& f) {
  parallel_for(exec.pool, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

// One token's keys or values [kv_heads, hd] into the cache, on the FP8 E4M3
// grid with one scale per head when the plan asks for an FP8 cache.
void write_kv(float* dst, const float* src, int64_t kv_heads, int64_t hd, bool fp8) {
  if (!fp8) {
    std::memcpy(dst, src, kv_heads * hd * sizeof(float));
    return;
  }
  std::vector<uint8_t> codes(kv_heads * hd);
  std::vector<float> scales(kv_heads);
  const Fp8Grid g = Fp8Grid::per_token(hd);  // a row per head
  fp8_quantize(src, InType::F32, kv_heads, hd, g, ElemType::E4M3, codes.data(), scales.data());
  fp8_dequantize(codes.data(), scales.data(), kv_heads, hd, g, ElemType::E4M3, dst);
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

// SwiGLU MLP on rows x[m, H] -> y[m, H]. With trace buffers, keeps the
// gate/up projections and the SwiGLU output.
void mlp(const PreparedLinear& gate, const PreparedLinear& up, const PreparedLinear& down, const float* x,
         int64_t m, float* y, std::vector<float>& scratch, const Exec& exec, std::vector<float>* t_gate = nullptr,
         std::vector<float>* t_up = nullptr, std::vector<float>* t_h = nullptr) {
  const int64_t F = gate.n;
  std::vector<float> g(m * F), u(m * F);
  gate.forward(x, m, g.data(), scratch, exec);
  up.forward(x, m, u.data(), scratch, exec);
  if (t_gate) *t_gate = g, *t_up = u;
  swiglu_forward(g.data(), g.data(), u.data(), m * F);
  if (t_h) *t_h = g;
  down.forward(g.data(), m, y, scratch, exec);
}

// Sparse MoE block: route each row, run each expert on its rows (in expert
// order), and sum weight * output into y in ascending expert order.
void moe(const PreparedLayer& L, const ModelConfig& cfg, const float* x, int64_t m, float* y,
         std::vector<float>& scratch, const Exec& exec, LayerTrace* t) {
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, K = cfg.num_experts_per_tok;
  std::vector<float> logits(m * E);
  L.router.forward(x, m, logits.data(), scratch, exec);
  std::vector<int32_t> experts(m * K);
  std::vector<float> weights(m * K);
  moe_route(experts.data(), weights.data(), logits.data(), m, E, K, cfg.norm_topk_prob);
  if (t) t->router_logits = logits, t->experts = experts, t->weights = weights, t->expert.assign(E, {});
  std::fill(y, y + m * H, 0.0f);
  std::vector<float> xe, ye;
  std::vector<int64_t> rows;
  std::vector<float> w;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear(), w.clear();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < K; ++j)
        if (experts[r * K + j] == e) rows.push_back(r), w.push_back(weights[r * K + j]);
    if (rows.empty()) continue;
    const int64_t me = static_cast<int64_t>(rows.size());
    xe.resize(me * H), ye.resize(me * H);
    for (int64_t i = 0; i < me; ++i) std::memcpy(&xe[i * H], x + rows[i] * H, H * sizeof(float));
    ExpertTrace* et = t ? &t->expert[e] : nullptr;
    mlp(L.expert_gate[e], L.expert_up[e], L.expert_down[e], xe.data(), me, ye.data(), scratch, exec,
        et ? &et->gate : nullptr, et ? &et->up : nullptr, et ? &et->h : nullptr);
    if (et) et->rows = rows, et->weight = w, et->x = xe, et->y = ye;
    for (int64_t i = 0; i < me; ++i)
      for (int64_t d = 0; d < H; ++d) y[rows[i] * H + d] = y[rows[i] * H + d] + ye[i * H + d] * w[i];
  }
}
}  // namespace

void forward(const Model& model, KvCache& cache, const TokenBatch& b, float* logits, const Exec& exec,
             const std::vector<int64_t>* rows, ForwardTrace* trace) {
  if (trace && rows) fail("forward: a traced pass computes the logits of every row");
  const ModelConfig& c = model.config();
  const int64_t n = b.size(), H = c.hidden_size, hd = c.head_dim;
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab_size) fail("forward: token id {} out of range [0, {})", b.tokens[i], c.vocab_size);
    if (b.pos[i] >= c.max_position_embeddings)
      fail("forward: position {} exceeds max_position_embeddings {}", b.pos[i], c.max_position_embeddings);
  }
  // Grow each slot's cache to its new length; positions must continue it.
  for (int64_t i = 0; i < n; ++i) {
    const int s = b.slot[i];
    if (b.pos[i] != cache.length(s)) fail("forward: slot {} expects position {}, got {}", s, cache.length(s), b.pos[i]);
    cache.reserve(s, b.pos[i] + 1);
    cache.set_length(s, b.pos[i] + 1);
  }
  std::vector<float> x(n * H), xn(n * H), q(n * c.q_dim()), k(n * c.kv_dim()), v(n * c.kv_dim());
  std::vector<float> att(n * c.q_dim()), y(n * H), scratch;
  embedding_forward(x.data(), b.tokens.data(), n, model.embedding(), H);
  // RoPE angles once per token, for every layer.
  const int64_t half = hd / 2;
  std::vector<float> rope_cos(n * half), rope_sin(n * half);
  per_token(exec, n, [&](int64_t i) { model.rope().angles(b.pos[i], &rope_cos[i * half], &rope_sin[i * half]); });
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (trace) trace->layers.assign(c.num_hidden_layers, {});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const PreparedLayer& L = model.layer(l);
    LayerTrace* t = trace ? &trace->layers[l] : nullptr;
    // Attention block.
    rmsnorm_forward(xn.data(), x.data(), L.input_norm, n, H, eps);
    L.q.forward(xn.data(), n, q.data(), scratch, exec);
    L.k.forward(xn.data(), n, k.data(), scratch, exec);
    L.v.forward(xn.data(), n, v.data(), scratch, exec);
    if (t) t->x_in = x, t->xn1 = xn, t->q_raw = q, t->k_raw = k;
    per_token(exec, n, [&](int64_t i) {
      float* qi = &q[i * c.q_dim()];
      float* ki = &k[i * c.kv_dim()];
      rmsnorm_forward(qi, qi, L.q_norm, nq, hd, eps);
      rmsnorm_forward(ki, ki, L.k_norm, nkv, hd, eps);
      rope_forward(qi, nq, hd, &rope_cos[i * half], &rope_sin[i * half]);
      rope_forward(ki, nkv, hd, &rope_cos[i * half], &rope_sin[i * half]);
      write_kv(cache.k(b.slot[i], l, b.pos[i]), ki, nkv, hd, model.plan().fp8_kv_cache);
      write_kv(cache.v(b.slot[i], l, b.pos[i]), &v[i * c.kv_dim()], nkv, hd, model.plan().fp8_kv_cache);
    });
    per_token(exec, n, [&](int64_t i) {
      std::vector<float> scores(b.pos[i] + 1);
      attention_forward(&att[i * c.q_dim()], &q[i * c.q_dim()], cache.k(b.slot[i], l, 0), cache.v(b.slot[i], l, 0),
                        b.pos[i] + 1, c.kv_dim(), nq, nkv, hd, scale, scores.data());
    });
    if (t) t->q = q, t->att = att;
    L.o.forward(att.data(), n, y.data(), scratch, exec);
    add_inplace(x.data(), y.data(), n * H);
    // MLP block.
    rmsnorm_forward(xn.data(), x.data(), L.post_norm, n, H, eps);
    if (t) t->x_mid = x, t->xn2 = xn;
    if (L.moe)
      moe(L, c, xn.data(), n, y.data(), scratch, exec, t);
    else
      mlp(L.gate, L.up, L.down, xn.data(), n, y.data(), scratch, exec, t ? &t->gate : nullptr,
          t ? &t->up : nullptr, t ? &t->h : nullptr);
    add_inplace(x.data(), y.data(), n * H);
  }
  if (rows) {  // gather the asked-for rows first: the lm_head is per row
    std::vector<float> xr(rows->size() * H);
    for (size_t i = 0; i < rows->size(); ++i) std::memcpy(&xr[i * H], &x[(*rows)[i] * H], H * sizeof(float));
    const int64_t m = static_cast<int64_t>(rows->size());
    rmsnorm_forward(xr.data(), xr.data(), model.final_norm(), m, H, eps);
    model.lm_head().forward(xr.data(), m, logits, scratch, exec);
    return;
  }
  rmsnorm_forward(xn.data(), x.data(), model.final_norm(), n, H, eps);
  if (trace) trace->x_final = x, trace->xn_final = xn;
  model.lm_head().forward(xn.data(), n, logits, scratch, exec);
}

}  // namespace mxrl
