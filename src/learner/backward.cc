#include "learner/backward.h"

#include <cmath>
#include <cstring>

#include "kernels/ops.h"
#include "kernels/ops_backward.h"
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
};

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

// dx[m, H] from dy through the SwiGLU MLP (gate, up, down) that saw x.
void mlp_backward(const LinearBackward& lin, const PreparedLinear& gate, const PreparedLinear& up,
                  const PreparedLinear& down, int gi, int ui, int di, const float* x, const float* g, const float* u,
                  const float* h, const float* dy, int64_t m, float* dx) {
  const int64_t F = gate.n;
  std::vector<float> dh(m * F), dg(m * F), du(m * F);
  lin(down, di, dy, h, m, dh.data(), false);
  swiglu_backward(dg.data(), du.data(), dh.data(), g, u, m * F);
  lin(gate, gi, dg.data(), x, m, dx, false);
  lin(up, ui, du.data(), x, m, dx, true);
}

}  // namespace

double backward(const Model& model, const ParamTable& layout, const BackwardWeights& bw, const KvCache& cache,
                const TokenBatch& b, const ForwardTrace& t, const float* dlogits, float* grads,
                const BackwardOptions& opt, const Exec& exec) {
  const ModelConfig& c = model.config();
  const int64_t n = b.size(), H = c.hidden_size, hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
  const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, half = hd / 2;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (static_cast<int64_t>(t.layers.size()) != c.num_hidden_layers || static_cast<int64_t>(t.x_final.size()) != n * H)
    fail("backward: the trace does not belong to this batch");
  // Sequences: (first row, length); each slot's rows are positions 0.. in order.
  std::vector<std::pair<int64_t, int64_t>> seqs;
  for (int64_t i = 0; i < n; ++i) {
    if (b.pos[i] == 0) seqs.push_back({i, 0});
    if (seqs.empty() || b.slot[i] != b.slot[seqs.back().first] || b.pos[i] != seqs.back().second)
      fail("backward: row {} breaks the whole-sequence layout (slot {}, position {})", i, b.slot[i], b.pos[i]);
    ++seqs.back().second;
  }
  auto G = [&](int index) { return grads + layout.entries()[index].offset; };
  const LinearBackward lin{layout, bw, grads, opt.grad_elem, exec};

  std::vector<float> rope_cos(n * half), rope_sin(n * half);
  parallel_for(exec.pool, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) model.rope().angles(b.pos[i], &rope_cos[i * half], &rope_sin[i * half]);
  });

  // Logits and final norm.
  std::vector<float> dx(n * H), dxn(n * H), tmp(n * H);
  lin(model.lm_head(), layout.lm_head(), dlogits, t.xn_final.data(), n, dxn.data(), false);
  rmsnorm_backward(dx.data(), G(layout.final_norm()), dxn.data(), t.x_final.data(), model.final_norm(), n, H, eps);

  // MoE aux loss: rows of all MoE layers together (as HF concatenates them).
  const int64_t E = c.num_experts, K = c.num_experts_per_tok;
  std::vector<double> count(E, 0.0), psum(E, 0.0);
  int64_t moe_rows = 0;
  if (opt.aux_loss_coef != 0.0)
    for (const LayerTrace& T : t.layers) {
      if (T.router_logits.empty()) continue;
      std::vector<float> p = T.router_logits;
      softmax_forward(p.data(), n, E);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t e = 0; e < E; ++e) psum[e] += p[r * E + e];
      for (int32_t e : T.experts) count[e] += 1.0;
      moe_rows += n;
    }
  double aux = 0.0;
  for (int64_t e = 0; e < E && moe_rows > 0; ++e)
    aux += opt.aux_loss_coef * E * (count[e] / moe_rows) * (psum[e] / moe_rows);

  std::vector<float> dq(n * qd), dk(n * kvd), dv(n * kvd), datt(n * qd);
  for (int64_t l = c.num_hidden_layers - 1; l >= 0; --l) {
    const PreparedLayer& L = model.layer(l);
    const LayerIndex& li = layout.layer(l);
    const LayerTrace& T = t.layers[l];
    // MLP block: x_out = x_mid + mlp(post_norm(x_mid)); dx is d(x_out).
    if (!L.moe) {
      mlp_backward(lin, L.gate, L.up, L.down, li.gate, li.up, li.down, T.xn2.data(), T.gate.data(), T.up.data(),
                   T.h.data(), dx.data(), n, dxn.data());
    } else {
      std::fill(dxn.begin(), dxn.end(), 0.0f);
      std::vector<float> dweights(n * K, 0.0f), dye, dxe;
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
                     li.expert_down[e], X.x.data(), X.gate.data(), X.up.data(), X.h.data(), dye.data(), me,
                     dxe.data());
        for (int64_t i = 0; i < me; ++i) add_inplace(&dxn[X.rows[i] * H], &dxe[i * H], H);
      }
      std::vector<float> dlog(n * E);
      moe_route_backward(dlog.data(), T.router_logits.data(), T.experts.data(), dweights.data(), n, E, K,
                         c.norm_topk_prob);
      if (moe_rows > 0) {  // + d(aux)/d(router logits)
        std::vector<float> p = T.router_logits, g(E), da(n * E);
        softmax_forward(p.data(), n, E);
        for (int64_t e = 0; e < E; ++e)
          g[e] = static_cast<float>(opt.aux_loss_weight * opt.aux_loss_coef * E * count[e] /
                                    (static_cast<double>(moe_rows) * moe_rows));
        std::vector<float> gr(n * E);
        for (int64_t r = 0; r < n; ++r) std::memcpy(&gr[r * E], g.data(), E * sizeof(float));
        softmax_backward(da.data(), p.data(), gr.data(), n, E);
        add_inplace(dlog.data(), da.data(), n * E);
      }
      lin(L.router, li.router, dlog.data(), T.xn2.data(), n, dxn.data(), true);
    }
    rmsnorm_backward(tmp.data(), G(li.post_norm), dxn.data(), T.x_mid.data(), L.post_norm, n, H, eps);
    add_inplace(dx.data(), tmp.data(), n * H);  // dx is now d(x_mid)

    // Attention block: x_mid = x_in + o(attention(...)).
    lin(L.o, li.o, dx.data(), T.att.data(), n, datt.data(), false);
    std::fill(dk.begin(), dk.end(), 0.0f);
    std::fill(dv.begin(), dv.end(), 0.0f);
    parallel_for(exec.pool, static_cast<int64_t>(seqs.size()), [&](int64_t s0, int64_t s1) {
      std::vector<float> scores;
      for (int64_t s = s0; s < s1; ++s) {
        const auto [start, len] = seqs[s];
        const int slot = b.slot[start];
        scores.resize(len);
        for (int64_t p = 0; p < len; ++p) {
          const int64_t i = start + p;
          attention_backward(&dq[i * qd], &dk[start * kvd], &dv[start * kvd], &datt[i * qd], &T.q[i * qd],
                             cache.k(slot, l, 0), cache.v(slot, l, 0), p + 1, kvd, nq, nkv, hd, scale,
                             scores.data());
        }
      }
    });
    parallel_for(exec.pool, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        rope_backward(&dq[i * qd], nq, hd, &rope_cos[i * half], &rope_sin[i * half]);
        rope_backward(&dk[i * kvd], nkv, hd, &rope_cos[i * half], &rope_sin[i * half]);
      }
    });
    std::vector<float> dq_raw(n * qd), dk_raw(n * kvd);
    rmsnorm_backward(dq_raw.data(), G(li.q_norm), dq.data(), T.q_raw.data(), L.q_norm, n * nq, hd, eps);
    rmsnorm_backward(dk_raw.data(), G(li.k_norm), dk.data(), T.k_raw.data(), L.k_norm, n * nkv, hd, eps);
    lin(L.q, li.q, dq_raw.data(), T.xn1.data(), n, dxn.data(), false);
    lin(L.k, li.k, dk_raw.data(), T.xn1.data(), n, dxn.data(), true);
    lin(L.v, li.v, dv.data(), T.xn1.data(), n, dxn.data(), true);
    rmsnorm_backward(tmp.data(), G(li.input_norm), dxn.data(), T.x_in.data(), L.input_norm, n, H, eps);
    add_inplace(dx.data(), tmp.data(), n * H);  // dx is now d(x_in)
  }
  embedding_backward(G(layout.embed()), dx.data(), b.tokens.data(), n, H);
  return aux;
}

}  // namespace mxrl
