#include "kernels/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/ops/ops_kernels.h"

namespace mxrl {

void embedding_forward(float* out, const int32_t* tokens, int64_t n, const float* table, int64_t dim) {
  for (int64_t i = 0; i < n; ++i) std::memcpy(out + i * dim, table + int64_t(tokens[i]) * dim, dim * sizeof(float));
}

namespace detail {
const OpsKernels& ops_kernels(Backend b) {
  return backend_table(b, kOpsScalar, MXRL_AVX2(kOpsAvx2), MXRL_AVX512(kOpsAvx512));
}
}  // namespace detail

void rmsnorm_forward(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps, const Exec& exec) {
  detail::ops_kernels(exec.backend).rmsnorm(y, x, w, rows, dim, eps);
}

RopeTable RopeTable::make(int64_t head_dim, double theta) {
  RopeTable t;
  t.head_dim = head_dim;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    // As transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in FP32.
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
    t.inv_freq.push_back(1.0f / p);
  }
  return t;
}

void RopeTable::angles(int64_t pos, float* c, float* s) const {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float a = static_cast<float>(pos) * inv_freq[i];
    c[i] = static_cast<float>(std::cos(static_cast<double>(a)));
    s[i] = static_cast<float>(std::sin(static_cast<double>(a)));
  }
}

void rope_forward(float* x, int64_t heads, int64_t pos, const RopeTable& rope, const Exec& exec) {
  std::vector<float> c(rope.inv_freq.size()), s(rope.inv_freq.size());
  rope.angles(pos, c.data(), s.data());
  rope_forward(x, heads, rope.head_dim, c.data(), s.data(), exec);
}

void rope_forward(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin, const Exec& exec) {
  detail::ops_kernels(exec.backend).rope(x, heads, head_dim, cos, sin);
}

void swiglu_forward(float* h, const float* gate, const float* up, int64_t n, const Exec& exec) {
  detail::ops_kernels(exec.backend).swiglu(h, gate, up, n);
}

void attention_forward(float* out, const float* q, const float* k, const float* v, int64_t npos, int64_t kv_stride,
                       int64_t heads, int64_t kv_heads, int64_t hd, float scale, float* scores, const Exec& exec) {
  detail::ops_kernels(exec.backend).attention(out, q, k, v, npos, kv_stride, heads, kv_heads, hd, scale, scores);
}

void attention_forward_group(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                             int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale,
                             const Exec& exec) {
  detail::ops_kernels(exec.backend).attention_group(out, q, T, p0, kg, vg, kv_stride, heads, kv_heads, hd, g, scale);
}

void softmax_forward(float* x, int64_t rows, int64_t n, const Exec& exec) {
  detail::ops_kernels(exec.backend).softmax(x, rows, n);
}

void log_softmax_gather(float* out, const float* logits, const int32_t* targets, int64_t rows, int64_t n,
                        const Exec& exec) {
  const auto& k = detail::ops_kernels(exec.backend);
  for (int64_t r = 0; r < rows; ++r) out[r] = logits[r * n + targets[r]] - k.logsumexp(logits + r * n, n);
}

void log_softmax_forward(float* out, const float* logits, int64_t rows, int64_t n, const Exec& exec) {
  const auto& k = detail::ops_kernels(exec.backend);
  for (int64_t r = 0; r < rows; ++r) {
    const float lse = k.logsumexp(logits + r * n, n);
    for (int64_t i = 0; i < n; ++i) out[r * n + i] = logits[r * n + i] - lse;
  }
}

void moe_route(int32_t* experts, float* weights, const float* logits, int64_t rows, int64_t num_experts, int64_t k,
               bool renormalize, const Exec& exec) {
  std::vector<float> p(num_experts);
  std::vector<int32_t> idx(num_experts);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(p.data(), logits + r * num_experts, num_experts * sizeof(float));
    softmax_forward(p.data(), 1, num_experts, exec);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    float total = 0.0f;
    for (int64_t i = 0; i < k; ++i) total = total + p[idx[i]];
    for (int64_t i = 0; i < k; ++i) {
      experts[r * k + i] = idx[i];
      weights[r * k + i] = renormalize ? p[idx[i]] / total : p[idx[i]];
    }
  }
}

}  // namespace mxrl
