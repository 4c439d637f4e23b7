// The bodies of the backward ops (kernels/ops/ops_backward.h), written once as
// plain scalar C++ and compiled twice beside ops_impl.h: ops_scalar.cc (the
// reference) and ops_avx512.cc (hardware FMA; without it every fmaf is a
// libm call). They call the forward's own attention_probs_impl,
// logsumexp_impl and softmax_impl, so recomputed probabilities are the
// forward's bit for bit. Include only from those two files.
#pragma once
#include "kernels/ops/ops_impl.h"

namespace mxrl::detail {
namespace {

// sum of a[i]*b[i] in the canonical lane order, each lane fma(a, b, acc).
float dot_canonical(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = __builtin_fmaf(a[i], b[i], acc[i % 16]);
  return lane_tree(acc);
}

void embedding_backward_impl(float* dtable, const float* dout, const int32_t* tokens, int64_t n, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = dtable + int64_t(tokens[i]) * dim;
    const float* d = dout + i * dim;
    for (int64_t c = 0; c < dim; ++c) row[c] = row[c] + d[c];
  }
}

void rmsnorm_backward_impl(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows,
                           int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    // inv exactly as rmsnorm_impl.
    const float var = sumsq_canonical(xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / __builtin_sqrtf(var + eps);
    float acc[16] = {};
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = xr[i] * inv;
      acc[i % 16] = __builtin_fmaf(dyr[i] * w[i], xhat, acc[i % 16]);
      if (dw) dw[i] = __builtin_fmaf(dyr[i], xhat, dw[i]);
    }
    const float mean = lane_tree(acc) / static_cast<float>(dim);
    for (int64_t i = 0; i < dim; ++i) dxr[i] = inv * (dyr[i] * w[i] - (xr[i] * inv) * mean);
  }
}

void rope_backward_impl(float* dx, int64_t heads, int64_t head_dim, const float* c, const float* s) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = dx + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float y1 = xh[i], y2 = xh[i + half];
      xh[i] = y1 * c[i] + y2 * s[i];
      xh[i + half] = y2 * c[i] - y1 * s[i];
    }
  }
}

void swiglu_backward_impl(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dh[i];
    const float sg = sigmoid_f(g);
    const float silu = g * sg;  // = silu_f(g)
    dup[i] = d * silu;
    dgate[i] = (d * u) * (sg * (1.0f + g * (1.0f - sg)));
  }
}

// One query head h (of KV group g): dq_h written, dk_j and dv_j (j < npos, at
// dkg + j*dkv_stride) accumulated; k_j and v_j at kg + j*kv_stride. kg, vg,
// dkg and dvg point at the group's position 0.
void attention_backward_head_impl(float* dqh, float* dkg, float* dvg, const float* doh, const float* qh,
                                  const float* kg, const float* vg, int64_t npos, int64_t kv_stride, int64_t dkv_stride,
                                  int64_t hd, float scale, float* scores) {
  // p, bit for bit as attention_forward (the same function).
  attention_probs_impl(scores, qh, kg, npos, kv_stride, hd, scale);
  // dp_j = dot_seq(dout_h, v_j) (each in d order), 16 keys side by side.
  constexpr int64_t kChunk = 16;
  float dp[kChunk];
  auto dp_chunk = [&](int64_t j0, int64_t nj) {
    for (int64_t j = 0; j < nj; ++j) dp[j] = 0.0f;
    for (int64_t d = 0; d < hd; ++d)
      for (int64_t j = 0; j < nj; ++j) dp[j] = __builtin_fmaf(doh[d], vg[(j0 + j) * kv_stride + d], dp[j]);
  };
  // Pass 1: D = sum_j p_j dp_j (in j order), and dv_j += p_j * dout_h.
  float dsum = 0.0f;
  for (int64_t j0 = 0; j0 < npos; j0 += kChunk) {
    const int64_t nj = std::min(kChunk, npos - j0);
    dp_chunk(j0, nj);
    for (int64_t j = 0; j < nj; ++j) {
      float* dvj = dvg + (j0 + j) * dkv_stride;
      const float p = scores[j0 + j];
      dsum = __builtin_fmaf(p, dp[j], dsum);
      for (int64_t d = 0; d < hd; ++d) dvj[d] = __builtin_fmaf(p, doh[d], dvj[d]);
    }
  }
  // Pass 2: ds_j = p_j (dp_j - D) (dp_j recomputed, identical), dq_h and dk_j.
  for (int64_t d = 0; d < hd; ++d) dqh[d] = 0.0f;
  for (int64_t j0 = 0; j0 < npos; j0 += kChunk) {
    const int64_t nj = std::min(kChunk, npos - j0);
    dp_chunk(j0, nj);
    for (int64_t j = 0; j < nj; ++j) {
      const float* kj = kg + (j0 + j) * kv_stride;
      float* dkj = dkg + (j0 + j) * dkv_stride;
      const float ds = scores[j0 + j] * (dp[j] - dsum);
      const float sds = scale * ds;
      for (int64_t d = 0; d < hd; ++d) {
        dqh[d] = __builtin_fmaf(ds, kj[d], dqh[d]);
        dkj[d] = __builtin_fmaf(sds, qh[d], dkj[d]);
      }
    }
  }
  for (int64_t d = 0; d < hd; ++d) dqh[d] = dqh[d] * scale;
}

void attention_backward_impl(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                             const float* v, int64_t npos, int64_t kv_stride, int64_t heads, int64_t kv_heads,
                             int64_t hd, float scale, float* scores) {
  const int64_t group = heads / kv_heads;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / group;
    attention_backward_head_impl(dq + h * hd, dk + g * hd, dv + g * hd, dout + h * hd, q + h * hd, k + g * hd,
                                 v + g * hd, npos, kv_stride, kv_stride, hd, scale, scores);
  }
}

// A run of T query tokens at positions p0 .. p0+T-1, the heads of KV group g
// only: per token ascending, per head ascending, attention_backward_head_impl.
void attention_backward_group_impl(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                                   int64_t p0, const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride,
                                   int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  const int64_t group = heads / kv_heads;
  std::vector<float> scores(p0 + T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t r = (t * heads + h) * hd;
      attention_backward_head_impl(dq + r, dkg, dvg, dout + r, q + r, kg, vg, p0 + t + 1, kv_stride, dkv_stride, hd,
                                   scale, scores.data());
    }
}

void log_softmax_gather_backward_impl(float* dlogits, const float* logits, const int32_t* targets, const float* dlogp,
                                      int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * n;
    float* dl = dlogits + r * n;
    const float g = dlogp[r];
    if (g == 0.0f) {
      for (int64_t i = 0; i < n; ++i) dl[i] = 0.0f;
      continue;
    }
    const float lse = logsumexp_impl(x, n);  // the forward's own
    for (int64_t i = 0; i < n; ++i) dl[i] = -g * exp_f(x[i] - lse);
    const int64_t t = targets[r];
    dl[t] = g * (1.0f - exp_f(x[t] - lse));
  }
}

void softmax_backward_impl(float* dx, const float* y, const float* dy, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * n;
    const float* dyr = dy + r * n;
    float* dxr = dx + r * n;
    const float s = dot_canonical(yr, dyr, n);
    for (int64_t i = 0; i < n; ++i) dxr[i] = yr[i] * (dyr[i] - s);
  }
}

void moe_route_backward_impl(float* dlogits, const float* logits, const int32_t* experts, const float* dweights,
                             int64_t rows, int64_t num_experts, int64_t k, bool renormalize) {
  std::vector<float> p(num_experts), dp(k);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* e = experts + r * k;
    const float* dw = dweights + r * k;
    float* dl = dlogits + r * num_experts;
    for (int64_t i = 0; i < num_experts; ++i) p[i] = logits[r * num_experts + i];
    softmax_impl(p.data(), 1, num_experts);  // as moe_route
    // dp over the chosen, rank order.
    if (renormalize) {
      float total = 0.0f;
      for (int64_t j = 0; j < k; ++j) total = total + p[e[j]];  // as moe_route
      float c = 0.0f;
      for (int64_t j = 0; j < k; ++j) c = __builtin_fmaf(dw[j], p[e[j]] / total, c);
      for (int64_t j = 0; j < k; ++j) dp[j] = (dw[j] - c) / total;
    } else {
      for (int64_t j = 0; j < k; ++j) dp[j] = dw[j];
    }
    float s = 0.0f;
    for (int64_t j = 0; j < k; ++j) s = __builtin_fmaf(p[e[j]], dp[j], s);
    for (int64_t i = 0; i < num_experts; ++i) dl[i] = p[i] * (0.0f - s);
    for (int64_t j = 0; j < k; ++j) dl[e[j]] = p[e[j]] * (dp[j] - s);
  }
}

constexpr OpsBackwardKernels kOpsBackward = {
    embedding_backward_impl, rmsnorm_backward_impl,   rope_backward_impl,
    swiglu_backward_impl,    attention_backward_impl, log_softmax_gather_backward_impl,
    softmax_backward_impl,   moe_route_backward_impl, attention_backward_group_impl};

}  // namespace
}  // namespace mxrl::detail
