#include "model/forward.h"
#include "model/moe.h"
#include "model/workspace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "numerics/fp8_grid.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

Model::Model(const ParamTable& params, PrecisionPlan plan, const Exec& exec)
    : Model(
          params, std::move(plan),
          [&](int i, const ParamInfo& p, const LinearPrecision& prec) {
            return PreparedLinear::prepare(p.name, params.data(i), p.shape[0], p.shape[1], prec, exec);
          },
          [&](int i, const ParamInfo& p, float* dst) {
            const float* src = params.data(i);
            const bool bf16 = plan_.bf16_embeddings;
            if (bf16)
              bf16_round(src, p.numel, dst, exec);
            else
              std::copy(src, src + p.numel, dst);
          }) {}

Model Model::from_shipment(const ModelConfig& cfg, PrecisionPlan plan, const WeightShipment& s, const Exec& exec) {
  const ParamTable layout(cfg, /*allocate=*/false);
  size_t used_linears = 0, used_copies = 0;
  Model m(
      layout, std::move(plan),
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
      if (!layout.find(name) || (layout.find(name)->role != ParamRole::Linear &&
                                 !(cfg.tie_word_embeddings && name == layout.entries()[layout.embed()].name)))
        fail("shipment: unexpected linear '{}'", name);
    for (const auto& [name, c] : s.copies)
      if (!layout.find(name) || layout.find(name)->role == ParamRole::Linear)
        fail("shipment: unexpected tensor '{}'", name);
    fail("shipment: {} linears and {} tensors shipped, {} and {} used", s.linears.size(), s.copies.size(), used_linears,
         used_copies);
  }
  return m;
}

WeightShipment Model::ship() const {
  WeightShipment s;
  for_each_tensor([&](const ModelTensor& t) {
    if (t.linear)
      s.linears.emplace(t.name, t.linear->payload());
    else
      s.copies.emplace(t.name, std::vector<float>(t.copy->data, t.copy->data + t.copy->numel));
  });
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

void Model::for_each_tensor(const std::function<void(const ModelTensor&)>& f) const {
  auto linear = [&](const PreparedLinear& l) { f({l.name, &l, nullptr}); };
  for (const PreparedLayer& L : layers_) {
    for (const PreparedLinear* p : {&L.q, &L.k, &L.v, &L.o}) linear(*p);
    if (L.moe) {
      linear(L.router);
      for (size_t e = 0; e < L.expert_gate.size(); ++e)
        for (const PreparedLinear* p : {&L.expert_gate[e], &L.expert_up[e], &L.expert_down[e]}) linear(*p);
    } else {
      for (const PreparedLinear* p : {&L.gate, &L.up, &L.down}) linear(*p);
    }
  }
  linear(lm_head_);
  for (const CopyInfo& c : copies_) {
    const NamedBuffer b{c.name, compute_.data() + c.offset, c.numel, c.shape};
    f({c.name, nullptr, &b});
  }
}

std::vector<const PreparedLinear*> Model::linears() const {
  std::vector<const PreparedLinear*> out;
  for_each_tensor([&](const ModelTensor& t) {
    if (t.linear) out.push_back(t.linear);
  });
  return out;
}

const PreparedLinear* Model::find_linear(const std::string& name) const {
  const PreparedLinear* found = nullptr;
  for_each_tensor([&](const ModelTensor& t) {
    if (t.linear && !found && t.name == name) found = t.linear;
  });
  return found;
}

PreparedLinear* Model::find_linear(const std::string& name) {
  // This model's own member, and *this is not const.
  return const_cast<PreparedLinear*>(std::as_const(*this).find_linear(name));
}

std::vector<NamedBuffer> Model::compute_copies() const {
  std::vector<NamedBuffer> out;
  for_each_tensor([&](const ModelTensor& t) {
    if (t.copy) out.push_back(*t.copy);
  });
  return out;
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
// codes[kv_heads * hd] and scales[kv_heads] are the token's scratch; head g goes to
// dst(g) (the cache keeps each group's history contiguous).
template <class Dst>
void write_kv(Dst dst, const float* src, int64_t kv_heads, int64_t hd, bool fp8, uint8_t* codes, float* scales,
              bool unit_scale) {
  if (!fp8) {
    for (int64_t g = 0; g < kv_heads; ++g) std::memcpy(dst(g), src + g * hd, hd * sizeof(float));
    return;
  }
  if (unit_scale) {  // ForwardOptions::kv_unit_scale: a static scale of 1.0 instead of amax / 448
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t d = 0; d < hd; ++d)
        dst(g)[d] = elem_decode(ElemType::E4M3, elem_encode(ElemType::E4M3, src[g * hd + d]));
    return;
  }
  const Fp8Grid grid = Fp8Grid::per_token(hd);  // a row per head
  fp8_quantize(src, InType::F32, kv_heads, hd, grid, ElemType::E4M3, codes, scales);
  for (int64_t g = 0; g < kv_heads; ++g)
    fp8_dequantize(codes + g * hd, scales + g, 1, hd, grid, ElemType::E4M3, dst(g));
}

// out = a + b elementwise (out may be a).
void add_into(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// Where an activation goes: straight into its trace buffer (sized) when the
// pass is traced, so that the backward reads it without a copy; otherwise
// the workspace buffer `fallback`.
float* into(std::vector<float>* traced, int64_t size, float* fallback) {
  if (!traced) return fallback;
  traced->resize(static_cast<size_t>(size));
  return traced->data();
}

// Linears that read the same x (q, k, v; gate, up): x's activation
// quantization made once for every one that shares the first one's.
void forward_same_input(std::initializer_list<std::pair<const PreparedLinear*, float*>> ls, const float* x, int64_t m,
                        ForwardWorkspace& w, const Exec& exec, const ForwardOptions& fo) {
  if (m == 0) return;
  const PreparedLinear& first = *ls.begin()->first;
  const float* in = first.gemm_input(x, m, w.scratch, exec, fo);
  for (const auto& [L, y] : ls)
    if (L->same_activations(first))
      L->multiply(in, m, y, exec, fo);
    else
      L->forward(x, m, y, w.scratch_other, exec, fo);
}

// SwiGLU MLP on rows x[m, H] -> y[m, H]. With trace buffers, keeps the
// gate/up projections and the SwiGLU output.
void mlp(const PreparedLinear& gate, const PreparedLinear& up, const PreparedLinear& down, const float* x, int64_t m,
         float* y, ForwardWorkspace& w, const Exec& exec, const ForwardOptions& fo,
         std::vector<float>* t_gate = nullptr, std::vector<float>* t_up = nullptr, std::vector<float>* t_h = nullptr) {
  const int64_t F = gate.n;
  if (!t_gate) w.gate.resize(m * F), w.up.resize(m * F);
  float* g = into(t_gate, m * F, w.gate.data());
  float* u = into(t_up, m * F, w.up.data());
  forward_same_input({{&gate, g}, {&up, u}}, x, m, w, exec, fo);
  float* h = into(t_h, m * F, g);  // untraced: in place over the gate
  swiglu_forward(h, g, u, m * F, exec);
  down.forward(h, m, y, w.scratch, exec, fo);
}

// Sparse MoE block: route each row, then the experts (moe_experts).
void moe(const PreparedLayer& L, const ModelConfig& cfg, const float* x, int64_t m, float* y, ForwardWorkspace& ws,
         const Exec& exec, const ForwardOptions& fo, LayerTrace* t) {
  const int64_t E = cfg.num_experts, K = cfg.num_experts_per_tok;
  std::vector<float>& logits = ws.router_logits;
  std::vector<int32_t>& experts = ws.experts;
  std::vector<float>& weights = ws.route_weights;
  logits.resize(m * E), experts.resize(m * K), weights.resize(m * K);
  L.router.forward(x, m, logits.data(), ws.scratch, exec, fo);
  moe_route(experts.data(), weights.data(), logits.data(), m, E, K, cfg.norm_topk_prob, exec);
  if (t) {
    t->router_logits.assign(logits.begin(), logits.end());
    t->experts.assign(experts.begin(), experts.end());
    t->weights.assign(weights.begin(), weights.end());
  }
  std::vector<ExpertLinears>& ls = ws.expert_linears;
  ls.resize(E);
  for (int64_t e = 0; e < E; ++e) ls[e] = {&L.expert_gate[e], &L.expert_up[e], &L.expert_down[e]};
  moe_experts(ls, x, m, cfg.hidden_size, experts.data(), weights.data(), K, y, ws, exec, fo, t);
}
}  // namespace

void moe_experts(std::span<const ExpertLinears> linears, const float* x, int64_t m, int64_t H, const int32_t* experts,
                 const float* weights, int64_t K, float* y, ForwardWorkspace& ws, const Exec& exec,
                 const ForwardOptions& fo, LayerTrace* t) {
  const int64_t E = static_cast<int64_t>(linears.size());
  if (t) t->expert.resize(E);
  std::fill(y, y + m * H, 0.0f);
  std::vector<float>& xe = ws.expert_x;
  std::vector<float>& ye = ws.expert_y;
  std::vector<int64_t>& rows = ws.expert_rows;
  std::vector<float>& w = ws.expert_w;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear(), w.clear();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < K; ++j)
        if (experts[r * K + j] == e) rows.push_back(r), w.push_back(weights[r * K + j]);
    ExpertTrace* et = t ? &t->expert[e] : nullptr;
    if (et) et->rows.assign(rows.begin(), rows.end()), et->weight.assign(w.begin(), w.end());
    if (rows.empty()) {
      if (et) et->x.clear(), et->y.clear(), et->gate.clear(), et->up.clear(), et->h.clear();
      continue;
    }
    const int64_t me = static_cast<int64_t>(rows.size());
    if (!et) xe.resize(me * H), ye.resize(me * H);
    float* xr = into(et ? &et->x : nullptr, me * H, xe.data());
    float* yr = into(et ? &et->y : nullptr, me * H, ye.data());
    for (int64_t i = 0; i < me; ++i) std::memcpy(&xr[i * H], x + rows[i] * H, H * sizeof(float));
    const ExpertLinears& le = linears[e];
    mlp(*le.gate, *le.up, *le.down, xr, me, yr, ws, exec, fo, et ? &et->gate : nullptr, et ? &et->up : nullptr,
        et ? &et->h : nullptr);
    for (int64_t i = 0; i < me; ++i)
      for (int64_t d = 0; d < H; ++d) y[rows[i] * H + d] = y[rows[i] * H + d] + yr[i * H + d] * w[i];
  }
}

void forward(const Model& model, KvCache& cache, const TokenBatch& b, float* logits, const Exec& exec,
             const std::vector<int64_t>* rows, ForwardTrace* trace, ForwardWorkspace* workspace,
             const ForwardOptions& fo) {
  if (trace && rows) fail("forward: a traced pass computes the logits of every row");
  const ModelConfig& c = model.config();
  const int64_t n = b.size(), H = c.hidden_size, hd = c.head_dim;
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= c.vocab_size)
      fail("forward: token id {} out of range [0, {})", b.tokens[i], c.vocab_size);
    if (b.pos[i] >= c.max_position_embeddings)
      fail("forward: position {} exceeds max_position_embeddings {}", b.pos[i], c.max_position_embeddings);
  }
  // Grow each slot's cache once to its new length (a prompt's tokens one by
  // one would regrow it log2(length) times); positions must continue it.
  std::vector<int64_t> need(static_cast<size_t>(cache.num_slots()), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int s = b.slot[i];
    if (s < 0 || s >= cache.num_slots())
      fail("forward: token {} names slot {}, the cache has {}", i, s, cache.num_slots());
    need[s] = std::max(need[s], b.pos[i] + 1);
  }
  for (int s = 0; s < cache.num_slots(); ++s)
    if (need[s] > 0) cache.reserve(s, need[s]);
  for (int64_t i = 0; i < n; ++i) {
    const int s = b.slot[i];
    if (b.pos[i] != cache.length(s)) fail("forward: slot {} expects position {}, got {}", s, cache.length(s), b.pos[i]);
    cache.set_length(s, b.pos[i] + 1);
  }
  ForwardWorkspace local;
  ForwardWorkspace& w = workspace ? *workspace : local;
  const int64_t half = hd / 2;
  w.x.resize(n * H), w.xn.resize(n * H), w.y.resize(n * H);
  w.q.resize(n * c.q_dim()), w.att.resize(n * c.q_dim()), w.k.resize(n * c.kv_dim()), w.v.resize(n * c.kv_dim());
  w.rope_cos.resize(n * half), w.rope_sin.resize(n * half);
  // Runs: maximal stretches of consecutive tokens of one slot at consecutive positions.
  w.runs.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (!w.runs.empty()) {
      auto& [start, len] = w.runs.back();
      if (b.slot[start] == b.slot[i] && b.pos[start] + len == b.pos[i] && start + len == i) {
        ++len;
        continue;
      }
    }
    w.runs.push_back({i, 1});
  }
  const bool fp8_kv = model.plan().fp8_kv_cache;
  if (fp8_kv) w.kv_codes.resize(n * c.kv_dim()), w.kv_scales.resize(n * nkv);
  float *x = w.x.data(), *xn = w.xn.data(), *y = w.y.data(), *q = w.q.data(), *k = w.k.data(), *v = w.v.data();
  float* att = w.att.data();
  const float *rope_cos = w.rope_cos.data(), *rope_sin = w.rope_sin.data();
  const int64_t L_count = c.num_hidden_layers, qd = c.q_dim(), kvd = c.kv_dim();
  // The residual stream entering layer l. Untraced: x, updated in place.
  // Traced: layer l's x_in, then its x_mid, then the next layer's x_in (or
  // x_final), each add writing the next buffer.
  if (trace) trace->layers.resize(L_count);
  float* xs = into(trace ? &trace->layers[0].x_in : nullptr, n * H, x);
  embedding_forward(xs, b.tokens.data(), n, model.embedding(), H);
  // RoPE angles once per token, for every layer.
  per_token(exec, n, [&](int64_t i) { model.rope().angles(b.pos[i], &w.rope_cos[i * half], &w.rope_sin[i * half]); });
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t l = 0; l < L_count; ++l) {
    const PreparedLayer& L = model.layer(l);
    LayerTrace* t = trace ? &trace->layers[l] : nullptr;
    // Attention block.
    float* xn1 = into(t ? &t->xn1 : nullptr, n * H, xn);
    rmsnorm_forward(xn1, xs, L.input_norm, n, H, eps, exec);
    float* q_raw = into(t ? &t->q_raw : nullptr, n * qd, q);  // untraced: normalized and rotated in place
    float* k_raw = into(t ? &t->k_raw : nullptr, n * kvd, k);
    forward_same_input({{&L.q, q_raw}, {&L.k, k_raw}, {&L.v, v}}, xn1, n, w, exec, fo);
    float* qr = into(t ? &t->q : nullptr, n * qd, q);
    per_token(exec, n, [&](int64_t i) {
      float* qi = &qr[i * qd];
      float* ki = &k[i * kvd];
      rmsnorm_forward(qi, &q_raw[i * qd], L.q_norm, nq, hd, eps, exec);
      rmsnorm_forward(ki, &k_raw[i * kvd], L.k_norm, nkv, hd, eps, exec);
      rope_forward(qi, nq, hd, &rope_cos[i * half], &rope_sin[i * half], exec);
      rope_forward(ki, nkv, hd, &rope_cos[i * half], &rope_sin[i * half], exec);
      uint8_t* codes = fp8_kv ? &w.kv_codes[i * kvd] : nullptr;
      float* scales = fp8_kv ? &w.kv_scales[i * nkv] : nullptr;
      const int si = b.slot[i];
      const int64_t pi = b.pos[i];
      write_kv([&](int64_t g) { return cache.k(si, l, g, pi); }, ki, nkv, hd, fp8_kv, codes, scales, fo.kv_unit_scale);
      write_kv([&](int64_t g) { return cache.v(si, l, g, pi); }, &v[i * kvd], nkv, hd, fp8_kv, codes, scales,
               fo.kv_unit_scale);
    });
    float* at = into(t ? &t->att : nullptr, n * qd, att);
    {
      PhaseTimer pt(exec.times, Phase::Attention);
      // One work item per (run of a slot's consecutive tokens, KV group).
      parallel_for(exec.pool, static_cast<int64_t>(w.runs.size()) * nkv, [&](int64_t a, int64_t e) {
        for (int64_t it = a; it < e; ++it) {
          const auto [i0, len] = w.runs[it / nkv];
          const int s = b.slot[i0];
          const int64_t g = it % nkv;
          attention_forward_group(&at[i0 * qd], &qr[i0 * qd], len, b.pos[i0], cache.k(s, l, g, 0), cache.v(s, l, g, 0),
                                  hd, nq, nkv, hd, g, scale, exec);
        }
      });
    }
    L.o.forward(at, n, y, w.scratch, exec, fo);
    float* xm = into(t ? &t->x_mid : nullptr, n * H, xs);
    add_into(xm, xs, y, n * H);
    // MLP block.
    float* xn2 = into(t ? &t->xn2 : nullptr, n * H, xn);
    rmsnorm_forward(xn2, xm, L.post_norm, n, H, eps, exec);
    if (L.moe)
      moe(L, c, xn2, n, y, w, exec, fo, t);
    else
      mlp(L.gate, L.up, L.down, xn2, n, y, w, exec, fo, t ? &t->gate : nullptr, t ? &t->up : nullptr,
          t ? &t->h : nullptr);
    xs = trace ? into(l + 1 < L_count ? &trace->layers[l + 1].x_in : &trace->x_final, n * H, nullptr) : xm;
    add_into(xs, xm, y, n * H);
  }
  if (rows) {  // gather the asked-for rows first: the lm_head is per row
    const int64_t m = static_cast<int64_t>(rows->size());
    w.rows_x.resize(m * H);
    float* xr = w.rows_x.data();
    for (int64_t i = 0; i < m; ++i) std::memcpy(&xr[i * H], &xs[(*rows)[i] * H], H * sizeof(float));
    rmsnorm_forward(xr, xr, model.final_norm(), m, H, eps, exec);
    model.lm_head().forward(xr, m, logits, w.scratch, exec, fo);
    return;
  }
  float* xnf = into(trace ? &trace->xn_final : nullptr, n * H, xn);
  rmsnorm_forward(xnf, xs, model.final_norm(), n, H, eps, exec);
  model.lm_head().forward(xnf, n, logits, w.scratch, exec, fo);
}

}  // namespace mxrl
