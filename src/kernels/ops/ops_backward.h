// The backward passes of the non-GEMM operations of kernels/ops/ops.h, one for
// each forward, as plain scalar FP32 C++ (the reference: one version, no
// SIMD). Shapes in comments; all buffers FP32 and row-major; "d" prefixes a
// gradient of the loss. Every reduction runs in one fixed order, so results
// never depend on threading or on how a batch was cut: these functions are
// single-threaded and callers parallelise over independent rows (or, for the
// accumulating ones, over disjoint destination rows).
//
// Written (=) outputs are overwritten; accumulated (+=) outputs are added to,
// in the order stated, so the caller zeroes them once and sums several calls.
#pragma once
#include <cstdint>

#include "util/exec.h"

namespace mxrl {

// Forward: out[n, dim] = table[tokens[i], :].
// dtable[V, dim] += dout[n, dim] scattered by tokens, for i = 0..n-1 in order
// (a repeated token accumulates its rows in position order).
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int64_t n, int64_t dim,
                        const Exec& exec = {});

// Forward: y[rows, dim] = w * (x * inv), inv = 1/sqrtf(sumsq_canonical(x_row)/dim + eps).
// With g = dy * w and xhat = x * inv (inv recomputed bit for bit as the forward):
//   dx[rows, dim] = inv * (g - xhat * mean(g * xhat))   written; must not alias dy or x
//   dw[dim]      += sum over rows of dy * xhat           accumulated in row order (fma)
//                                                         (dw == nullptr: skipped)
// mean(g * xhat): canonical lanes (kernels/ops/math.h order, each lane fma(g, xhat, acc),
// as sumsq_canonical), divided by dim.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows, int64_t dim,
                      float eps, const Exec& exec = {});

// Forward: rope_forward(x, heads, head_dim, cos, sin), x1' = x1*c - x2*s, x2' = x2*c + x1*s.
// In place on dx[heads, head_dim] (dy in, dx out): the inverse rotation
//   dx1 = dy1*c + dy2*s, dx2 = dy2*c - dy1*s; cos/sin[head_dim/2].
void rope_backward(float* dx, int64_t heads, int64_t head_dim, const float* cos, const float* sin,
                   const Exec& exec = {});

// Forward: h[n] = silu(gate) * up.
//   dup[n]   = dh * silu(gate)                                        written
//   dgate[n] = dh * up * sig(gate) * (1 + gate * (1 - sig(gate)))     written
// (sig = sigmoid_f, silu = silu_f as the forward). Elementwise: dgate or dup may
// alias any input (not each other).
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n,
                     const Exec& exec = {});

// Forward: attention_forward for ONE query token, same arguments: q[heads, hd];
// keys/values j = 0..npos-1 at k + j*kv_stride, v + j*kv_stride, each
// [kv_heads, hd]; head h reads KV group g = h / (heads/kv_heads); dout[heads, hd];
// scores scratch [npos]. The probabilities p are recomputed with the forward's
// own function (bit for bit those attention_forward used). Per head h ascending:
//   dp_j  = dot_seq(dout_h, v_j)               D = sum_j p_j dp_j (sequential fma, j ascending)
//   ds_j  = p_j * (dp_j - D)
//   dq_h  = scale * sum_j ds_j k_j             dq[heads, hd] written
//   dk_j += (scale * ds_j) * q_h               dk/dv accumulated in k/v's layout
//   dv_j += p_j * dout_h                       (row j at j*kv_stride + g*hd), j ascending
// Entries of dk/dv outside the [kv_heads, hd] rows (kv_stride padding) are untouched.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, int64_t npos, int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd,
                        float scale, float* scores, const Exec& exec = {});

// attention_backward for a run of T query tokens of one sequence at positions
// p0 .. p0+T-1 (token t sees keys 0 .. p0+t), restricted to KV group g's heads:
// dq/dout/q [T, heads, hd] (other heads' dq untouched). kg and vg point at
// group g's key and value at position 0, position j at + j*kv_stride (as
// attention_forward_group); dkg and dvg at its gradients, position j at
// + j*dkv_stride, accumulated there (so keys read from a KvCache history,
// stride hd, can have their gradients added to [token][kv_heads * hd] rows),
// token t ascending, then head ascending: bit for bit attention_backward per
// token in order, so (sequence, group) pairs can be cut across threads.
void attention_backward_group(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                              int64_t p0, const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride,
                              int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale,
                              const Exec& exec = {});

// Forward: out[r] = log_softmax(logits[r, :])[targets[r]], logits[rows, n].
//   dlogits[r, i] = dlogp[r] * ([i == targets[r]] - exp_f(logits[r, i] - lse_r))   written
// lse_r = max + log(canonical sum of exp_f(x - max)), the forward's own logsumexp.
// Rows with dlogp[r] == 0 are zeros, without computing any exp.
void log_softmax_gather_backward(float* dlogits, const float* logits, const int32_t* targets, const float* dlogp,
                                 int64_t rows, int64_t n, const Exec& exec = {});

// Forward: y[rows, n] = softmax(x) (given y).
//   dx[rows, n] = y * (dy - sum(y * dy))   written; the sum in canonical lanes
// (kernels/ops/math.h order, each lane fma(y, dy, acc)). dx may alias dy or y.
void softmax_backward(float* dx, const float* y, const float* dy, int64_t rows, int64_t n, const Exec& exec = {});

// Forward: moe_route(experts, weights, logits, rows, E, k, renormalize): the
// gradient of weights[rows, k] w.r.t. logits[rows, E], the expert choice
// experts[rows, k] held fixed. p = softmax(logits row) recomputed as moe_route does.
//   without renormalize: w_j = p_{e_j}        dp_{e_j} = dw_j
//   with renormalize:    w_j = p_{e_j} / S    dp_{e_j} = (dw_j - sum_i dw_i w_i) / S
//                        (S = sum of the chosen p in rank order, as the forward)
//   dlogits[r, e] = p_e * (dp_e - sum_j p_{e_j} dp_{e_j})   written (dp_e = 0 unless chosen)
// Sums over the k chosen are sequential fmas in rank order.
void moe_route_backward(float* dlogits, const float* logits, const int32_t* experts, const float* dweights,
                        int64_t rows, int64_t num_experts, int64_t k, bool renormalize, const Exec& exec = {});

}  // namespace mxrl
