// The bodies of the non-GEMM kernels, written once as plain scalar C++ and
// compiled twice: ops_scalar.cc (baseline x86-64, the reference) and
// ops_avx512.cc (AVX-512 + FMA flags). Both copies perform the same IEEE
// operations in the same order (no -ffast-math, -ffp-contract=off), so the
// compiler may vectorize only where that changes nothing, and the two agree
// bit for bit (ops_test.cc checks). Include only from those two files.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops/math.h"
#include "kernels/ops/ops_kernels.h"

namespace mxrl::detail {
namespace {

void rmsnorm_impl(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float var = sumsq_canonical(xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / __builtin_sqrtf(var + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void rope_impl(float* x, int64_t heads, int64_t head_dim, const float* c, const float* s) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* xh = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = xh[i], x2 = xh[i + half];
      xh[i] = x1 * c[i] - x2 * s[i];
      xh[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}

void swiglu_impl(float* h, const float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = silu_f(gate[i]) * up[i];
}

// The attention probabilities of one query head: p[npos] = softmax_j(dot(qh, k_j) * scale)
// with k_j at kg + j*kv_stride ([hd] each, kg already offset to the head's KV group).
// Dot products 16 keys side by side (each still a sequential fma in d order), max,
// exp_f, canonical sum, division. attention_impl and attention_backward both use it.
void attention_probs_impl(float* p, const float* qh, const float* kg, int64_t npos, int64_t kv_stride, int64_t hd,
                          float scale) {
  constexpr int64_t kChunk = 16;  // keys whose dot products run side by side (each still in d order)
  for (int64_t j0 = 0; j0 < npos; j0 += kChunk) {
    const int64_t nj = std::min(kChunk, npos - j0);
    float acc[kChunk] = {};
    for (int64_t d = 0; d < hd; ++d)
      for (int64_t j = 0; j < nj; ++j) acc[j] = __builtin_fmaf(qh[d], kg[(j0 + j) * kv_stride + d], acc[j]);
    for (int64_t j = 0; j < nj; ++j) p[j0 + j] = acc[j] * scale;
  }
  float m = -INFINITY;
  for (int64_t j = 0; j < npos; ++j) m = std::max(m, p[j]);
  for (int64_t j = 0; j < npos; ++j) p[j] = exp_f(p[j] - m);
  const float denom = sum_canonical(p, npos);
  for (int64_t j = 0; j < npos; ++j) p[j] = p[j] / denom;
}

// One query head: oh[hd] = sum_j p_j v_j (sequential fma over j) with p from
// attention_probs_impl; vg = v + g*hd, the head's KV group.
void attention_head_impl(float* oh, const float* qh, const float* kg, const float* vg, int64_t npos, int64_t kv_stride,
                         int64_t hd, float scale, float* scores) {
  attention_probs_impl(scores, qh, kg, npos, kv_stride, hd, scale);
  for (int64_t d = 0; d < hd; ++d) oh[d] = 0.0f;
  for (int64_t j = 0; j < npos; ++j) {
    const float* vj = vg + j * kv_stride;
    const float p = scores[j];
    for (int64_t d = 0; d < hd; ++d) oh[d] = __builtin_fmaf(p, vj[d], oh[d]);
  }
}

void attention_impl(float* out, const float* q, const float* k, const float* v, int64_t npos, int64_t kv_stride,
                    int64_t heads, int64_t kv_heads, int64_t hd, float scale, float* scores) {
  const int64_t group = heads / kv_heads;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / group;
    attention_head_impl(out + h * hd, q + h * hd, k + g * hd, v + g * hd, npos, kv_stride, hd, scale, scores);
  }
}

// A run of T query tokens at positions p0 .. p0+T-1 of one sequence, the heads
// of KV group g only: per token, per head ascending, attention_head_impl.
void attention_group_impl(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  const int64_t group = heads / kv_heads;
  std::vector<float> scores(p0 + T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = g * group; h < (g + 1) * group; ++h)
      attention_head_impl(out + (t * heads + h) * hd, q + (t * heads + h) * hd, kg, vg, p0 + t + 1, kv_stride, hd,
                          scale, scores.data());
}

void softmax_impl(float* x, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * n;
    const float m = *std::max_element(xr, xr + n);
    for (int64_t i = 0; i < n; ++i) xr[i] = exp_f(xr[i] - m);
    const float s = sum_canonical(xr, n);
    for (int64_t i = 0; i < n; ++i) xr[i] = xr[i] / s;
  }
}

// max + log(sum(exp(x - max))) over a row of n.
float logsumexp_impl(const float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = acc[i % 16] + exp_f(x[i] - m);
  return m + std::log(lane_tree(acc));
}

constexpr OpsKernels kOps = {rmsnorm_impl, rope_impl,      swiglu_impl,          attention_impl,
                             softmax_impl, logsumexp_impl, attention_probs_impl, attention_group_impl};

}  // namespace
}  // namespace mxrl::detail
