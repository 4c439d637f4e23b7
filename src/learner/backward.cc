#include "learner/backward.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <optional>

#include "kernels/ops/ops.h"
#include "kernels/ops/ops_backward.h"
#include "learner/linear_grad.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

BackwardWeights BackwardWeights::prepare(const ParamTable& masters, const PrecisionPlan& plan, const Exec& exec) {
  PhaseTimer t(exec.times, Phase::WeightQuant);
  BackwardWeights bw;
  bw.wt.resize(masters.entries().size());
  for (size_t i = 0; i < masters.entries().size(); ++i) {
    const ParamInfo& p = masters.entries()[i];
    if (p.role != ParamRole::Linear) continue;
    bw.wt[i] = prepare_dgrad_weight(p.name, masters.data(static_cast<int>(i)), p.shape[0], p.shape[1],
                                    plan.for_param(p), exec);
  }
  const int lm = masters.lm_head();
  if (masters.entries()[lm].role != ParamRole::Linear) {  // tied: the embedding, under lm_head's precision
    const ParamInfo& p = masters.entries()[lm];
    bw.wt[lm] = prepare_dgrad_weight(p.name, masters.data(lm), p.shape[0], p.shape[1], plan.lm_head, exec);
  }
  return bw;
}

namespace {

// One linear's backward: dx (+)= dgrad, dW += wgrad.
struct LinearBackward {
  const ParamTable& layout;
  const BackwardWeights& bw;
  float* grads;
  ElemType grad_elem;
  const Exec& exec;

  void operator()(const PreparedLinear& L, int index, const float* dy, const float* x, int64_t m, float* dx,
                  bool accumulate) const {
    if (dx) linear_dgrad(L.prec, grad_elem, bw.wt[index], dy, m, dx, accumulate, exec);
    linear_wgrad(L.prec, grad_elem, dy, x, m, L.n, L.k, grads + layout.entries()[index].offset, exec);
  }
  // Linears that read the same x (q, k, v; gate, up), each with its dy,
  // accumulating their dgrads into dx in the order given: the wgrad operand
  // X^T is packed once for every linear of the first one's precision.
  struct Use {
    const PreparedLinear& L;
    int index;
    const float* dy;
  };
  void same_input(std::initializer_list<Use> uses, const float* x, int64_t m, float* dx) const {
    if (m == 0) return;
    const PreparedLinear& first = uses.begin()->L;
    const PackedWeight xp = wgrad_operand(first.prec, x, m, first.k, exec);
    bool accumulate = false;
    for (const Use& u : uses) {
      linear_dgrad(u.L.prec, grad_elem, bw.wt[u.index], u.dy, m, dx, accumulate, exec);
      accumulate = true;
      float* dw = grads + layout.entries()[u.index].offset;
      if (u.L.same_activations(first))
        linear_wgrad(u.L.prec, grad_elem, u.dy, xp, m, u.L.n, dw, exec);
      else
        linear_wgrad(u.L.prec, grad_elem, u.dy, x, m, u.L.n, u.L.k, dw, exec);
    }
  }
};

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

// dx[m, H] from dy through the SwiGLU MLP (gate, up, down) that saw x.
void mlp_backward(const LinearBackward& lin, const PreparedLinear& gate, const PreparedLinear& up,
                  const PreparedLinear& down, int gi, int ui, int di, const float* x, const float* g, const float* u,
                  const float* h, const float* dy, int64_t m, float* dx, BackwardWorkspace& w) {
  const int64_t F = gate.n;
  w.dh.resize(m * F), w.dg.resize(m * F), w.du.resize(m * F);
  lin(down, di, dy, h, m, w.dh.data(), false);
  swiglu_backward(w.dg.data(), w.du.data(), w.dh.data(), g, u, m * F, lin.exec);
  lin.same_input({{gate, gi, w.dg.data()}, {up, ui, w.du.data()}}, x, m, dx);
}

}  // namespace

double backward(const Model& model, const ParamTable& layout, const BackwardWeights& bw, const KvCache& cache,
                const TokenBatch& b, const ForwardTrace& t, const float* dlogits, float* grads,
                const BackwardOptions& opt, const Exec& exec, BackwardWorkspace* workspace) {
  const ModelConfig& c = model.config();
  const int64_t n = b.size(), H = c.hidden_size, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, half = hd / 2;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (static_cast<int64_t>(t.layers.size()) != c.num_hidden_layers || static_cast<int64_t>(t.x_final.size()) != n * H)
    fail("backward: the trace does not belong to this batch");
  BackwardWorkspace local;
  BackwardWorkspace& w = workspace ? *workspace : local;
  // Sequences: (first row, length); each slot's rows are positions 0.. in order.
  std::vector<std::pair<int64_t, int64_t>>& seqs = w.seqs;
  seqs.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (b.pos[i] == 0) seqs.push_back({i, 0});
    if (seqs.empty() || b.slot[i] != b.slot[seqs.back().first] || b.pos[i] != seqs.back().second)
      fail("backward: row {} breaks the whole-sequence layout (slot {}, position {})", i, b.slot[i], b.pos[i]);
    ++seqs.back().second;
  }
  auto G = [&](int index) { return grads + layout.entries()[index].offset; };
  const LinearBackward lin{layout, bw, grads, opt.grad_elem, exec};

  w.rope_cos.resize(n * half), w.rope_sin.resize(n * half);
  float *rope_cos = w.rope_cos.data(), *rope_sin = w.rope_sin.data();
  parallel_for(exec.pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) model.rope().angles(b.pos[i], &rope_cos[i * half], &rope_sin[i * half]);
  });

  // Logits and final norm.
  w.dx.resize(n * H), w.dxn.resize(n * H), w.tmp.resize(n * H);
  float *dx = w.dx.data(), *dxn = w.dxn.data(), *tmp = w.tmp.data();
  lin(model.lm_head(), layout.lm_head(), dlogits, t.xn_final.data(), n, dxn, false);
  rmsnorm_backward(dx, G(layout.final_norm()), dxn, t.x_final.data(), model.final_norm(), n, H, eps, exec);

  // MoE aux loss: rows of all MoE layers together (as HF concatenates them).
  const int64_t E = c.num_experts, K = c.num_experts_per_tok;
  std::vector<double>& count = w.count;
  std::vector<double>& psum = w.psum;
  count.assign(E, 0.0), psum.assign(E, 0.0);
  int64_t moe_rows = 0;
  if (opt.aux_loss_coef != 0.0)
    for (const LayerTrace& T : t.layers) {
      if (T.router_logits.empty()) continue;
      std::vector<float>& p = w.probs;
      p.assign(T.router_logits.begin(), T.router_logits.end());
      softmax_forward(p.data(), n, E, exec);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t e = 0; e < E; ++e) psum[e] += p[r * E + e];
      for (int32_t e : T.experts) count[e] += 1.0;
      moe_rows += n;
    }
  double aux = 0.0;
  for (int64_t e = 0; e < E && moe_rows > 0; ++e)
    aux += opt.aux_loss_coef * E * (count[e] / moe_rows) * (psum[e] / moe_rows);

  w.dq.resize(n * qd), w.dk.resize(n * kvd), w.dv.resize(n * kvd), w.datt.resize(n * qd);
  w.dq_raw.resize(n * qd), w.dk_raw.resize(n * kvd);
  float *dq = w.dq.data(), *dk = w.dk.data(), *dv = w.dv.data(), *datt = w.datt.data();
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    const PreparedLayer& L = model.layer(l);
    const LayerIndex& li = layout.layer(l);
    const LayerTrace& T = t.layers[l];
    // MLP block: x_out = x_mid + mlp(post_norm(x_mid)); dx is d(x_out).
    if (!L.moe) {
      mlp_backward(lin, L.gate, L.up, L.down, li.gate, li.up, li.down, T.xn2.data(), T.gate.data(), T.up.data(),
                   T.h.data(), dx, n, dxn, w);
    } else {
      std::fill(dxn, dxn + n * H, 0.0f);
      std::vector<float>& dweights = w.dweights;
      std::vector<float>& dye = w.dye;
      std::vector<float>& dxe = w.dxe;
      dweights.assign(n * K, 0.0f);
      for (int64_t e = 0; e < E; ++e) {
        const ExpertTrace& X = T.expert[e];
        const int64_t me = static_cast<int64_t>(X.rows.size());
        if (me == 0) continue;
        dye.resize(me * H), dxe.resize(me * H);
        for (int64_t i = 0; i < me; ++i) {
          const int64_t r = X.rows[i];
          float dwt = 0.0f;
          for (int64_t d = 0; d < H; ++d) {
            dye[i * H + d] = dx[r * H + d] * X.weight[i];
            dwt = std::fma(dx[r * H + d], X.y[i * H + d], dwt);
          }
          for (int64_t j = 0; j < K; ++j)
            if (T.experts[r * K + j] == e) dweights[r * K + j] = dwt;
        }
        mlp_backward(lin, L.expert_gate[e], L.expert_up[e], L.expert_down[e], li.expert_gate[e], li.expert_up[e],
                     li.expert_down[e], X.x.data(), X.gate.data(), X.up.data(), X.h.data(), dye.data(), me, dxe.data(),
                     w);
        for (int64_t i = 0; i < me; ++i) add_inplace(&dxn[X.rows[i] * H], &dxe[i * H], H);
      }
      std::vector<float>& dlog = w.dlog;
      dlog.resize(n * E);
      moe_route_backward(dlog.data(), T.router_logits.data(), T.experts.data(), dweights.data(), n, E, K,
                         c.norm_topk_prob, exec);
      if (moe_rows > 0) {  // + d(aux)/d(router logits)
        std::vector<float>& p = w.probs;
        std::vector<float>& gr = w.aux_grad;
        std::vector<float>& da = w.daux;
        p.assign(T.router_logits.begin(), T.router_logits.end());
        gr.resize(n * E), da.resize(n * E);
        softmax_forward(p.data(), n, E, exec);
        for (int64_t e = 0; e < E; ++e)  // the same gradient for every row
          gr[e] = static_cast<float>(opt.aux_loss_weight * opt.aux_loss_coef * E * count[e] /
                                     (static_cast<double>(moe_rows) * moe_rows));
        for (int64_t r = 1; r < n; ++r) std::memcpy(&gr[r * E], gr.data(), E * sizeof(float));
        softmax_backward(da.data(), p.data(), gr.data(), n, E, exec);
        add_inplace(dlog.data(), da.data(), n * E);
      }
      lin(L.router, li.router, dlog.data(), T.xn2.data(), n, dxn, true);
    }
    rmsnorm_backward(tmp, G(li.post_norm), dxn, T.x_mid.data(), L.post_norm, n, H, eps, exec);
    add_inplace(dx, tmp, n * H);  // dx is now d(x_mid)

    // Attention block: x_mid = x_in + o(attention(...)).
    lin(L.o, li.o, dx, T.att.data(), n, datt, false);
    std::fill(dk, dk + n * kvd, 0.0f);
    std::fill(dv, dv + n * kvd, 0.0f);
    std::optional<PhaseTimer> attention_timer(std::in_place, exec.times, Phase::Attention);
    // One work item per (sequence, KV group): each owns its group's rows of dk/dv.
    parallel_for(exec.pool, static_cast<int64_t>(seqs.size()) * nkv, [&](int64_t a, int64_t e) {
      for (int64_t it = a; it < e; ++it) {
        const auto [start, len] = seqs[it / nkv];
        const int slot = b.slot[start];
        const int64_t g = it % nkv;
        // Keys and values from the cache's group history (position stride
        // hd), their gradients into [token][kv_dim] rows (stride kvd).
        attention_backward_group(&dq[start * qd], &dk[start * kvd + g * hd], &dv[start * kvd + g * hd],
                                 &datt[start * qd], &T.q[start * qd], len, 0, cache.k(slot, l, g, 0),
                                 cache.v(slot, l, g, 0), hd, kvd, nq, nkv, hd, g, scale, exec);
      }
    });
    attention_timer.reset();
    parallel_for(exec.pool, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        rope_backward(&dq[i * qd], nq, hd, &rope_cos[i * half], &rope_sin[i * half], exec);
        rope_backward(&dk[i * kvd], nkv, hd, &rope_cos[i * half], &rope_sin[i * half], exec);
      }
    });
    float *dq_raw = w.dq_raw.data(), *dk_raw = w.dk_raw.data();
    rmsnorm_backward(dq_raw, G(li.q_norm), dq, T.q_raw.data(), L.q_norm, n * nq, hd, eps, exec);
    rmsnorm_backward(dk_raw, G(li.k_norm), dk, T.k_raw.data(), L.k_norm, n * nkv, hd, eps, exec);
    lin.same_input({{L.q, li.q, dq_raw}, {L.k, li.k, dk_raw}, {L.v, li.v, dv}}, T.xn1.data(), n, dxn);
    rmsnorm_backward(tmp, G(li.input_norm), dxn, T.x_in.data(), L.input_norm, n, H, eps, exec);
    add_inplace(dx, tmp, n * H);  // dx is now d(x_in)
  }
  embedding_backward(G(layout.embed()), dx, b.tokens.data(), n, H, exec);
  return aux;
}

}  // namespace mxrl
