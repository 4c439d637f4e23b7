// The non-GEMM operations of a Qwen3 forward pass, each on rows that are
// processed independently (batch invariance: a row's result never depends on
// the other rows of a call). Shapes in comments; all buffers FP32 and
// row-major. These are the scalar references; reductions use the canonical
// orders of kernels/ops/math.h.
#pragma once
#include <cstdint>
#include <vector>

#include "util/exec.h"

namespace mxrl {

// out[n, dim] = table[tokens[i], :]
void embedding_forward(float* out, const int32_t* tokens, int64_t n, const float* table, int64_t dim);

// y[rows, dim] = w * (x * rsqrt(mean(x^2) + eps)); y may alias x.
// (RMSNorm as HF Qwen3: FP32 statistics, weight applied after normalizing.)
void rmsnorm_forward(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                     const Exec& exec = {});

// RoPE (non-interleaved, rotate_half) with per-position tables.
struct RopeTable {
  int64_t head_dim = 0;
  std::vector<float> inv_freq;  // [head_dim/2] = fp32(1 / theta^(2i/head_dim))
  // cos/sin of fp32(pos * inv_freq[i]) for i < head_dim/2
  void angles(int64_t pos, float* cos_out, float* sin_out) const;
  static RopeTable make(int64_t head_dim, double theta);
};
// x[heads, head_dim] at position pos, rotated in place:
//   x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin  (x1, x2 the two halves)
void rope_forward(float* x, int64_t heads, int64_t pos, const RopeTable& rope, const Exec& exec = {});
// The same with the angles of the position already computed (RopeTable::angles):
// cos/sin[head_dim/2], so a token's angles serve every layer, q and k alike.
void rope_forward(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin, const Exec& exec = {});

// h[n] = silu(gate[n]) * up[n]
void swiglu_forward(float* h, const float* gate, const float* up, int64_t n, const Exec& exec = {});

// Causal attention for one query token of one sequence.
//   q[heads, hd] (normed, rotated); keys/values for positions 0..npos-1 of
//   the sequence at k + j*kv_stride, v + j*kv_stride, each [kv_heads, hd];
//   out[heads, hd]; scores scratch [npos].
// scores_j = dot_seq(q_h, k_j) * scale; p = softmax (exp_f, canonical sum,
// then division); out_h[d] = sequential fma over j of p_j * v_j[d].
void attention_forward(float* out, const float* q, const float* k, const float* v, int64_t npos, int64_t kv_stride,
                       int64_t heads, int64_t kv_heads, int64_t hd, float scale, float* scores, const Exec& exec = {});

// The same for a run of T query tokens of one sequence at positions p0 ..
// p0+T-1 (token t attends to keys 0 .. p0+t), restricted to the heads of KV
// group g (heads g*G .. g*G+G-1, G = heads/kv_heads): q and out are [T, heads,
// hd], row t of each token at t*heads*hd; the other heads' outputs are not
// touched. kg and vg point at group g's key and value at position 0, position
// j at kg + j*kv_stride: k + g*hd with kv_stride kv_heads*hd for rows of
// [pos][kv_heads * hd], or a KvCache group's contiguous history (KvCache::k)
// with kv_stride hd. Bit for bit attention_forward per token, so runs and
// groups can be cut across threads in any way. The AVX-512 kernel transposes
// the group's keys once per call into 16-key chunks and computes 16 dot
// products per vector, each still a sequential fma in d order.
void attention_forward_group(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                             int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale,
                             const Exec& exec = {});

// In place over rows of n: softmax (max-subtracted, exp_f, canonical sum, division).
void softmax_forward(float* x, int64_t rows, int64_t n, const Exec& exec = {});
// log p(target) for each row of logits[rows, n]:
//   logit[t] - (max + log(canonical_sum(exp_f(logit - max))))
void log_softmax_gather(float* out, const float* logits, const int32_t* targets, int64_t rows, int64_t n,
                        const Exec& exec = {});
// The whole log-softmax row: out[rows, n].
void log_softmax_forward(float* out, const float* logits, int64_t rows, int64_t n, const Exec& exec = {});

// MoE routing for rows of router logits[rows, E]: FP32 softmax over all
// experts, top-k (larger probability first; ties: lower index), optionally
// renormalized over the k chosen (sum in rank order). experts/weights [rows, k].
void moe_route(int32_t* experts, float* weights, const float* logits, int64_t rows, int64_t num_experts, int64_t k,
               bool renormalize, const Exec& exec = {});

}  // namespace mxrl
