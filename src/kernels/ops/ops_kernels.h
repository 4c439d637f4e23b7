// The per-backend table behind kernels/ops/ops.h (see ops_impl.h).
#pragma once
#include <cstdint>

#include "util/exec.h"

namespace mxrl::detail {

struct OpsKernels {
  void (*rmsnorm)(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps);
  void (*rope)(float* x, int64_t heads, int64_t head_dim, const float* cos, const float* sin);
  void (*swiglu)(float* h, const float* gate, const float* up, int64_t n);
  void (*attention)(float* out, const float* q, const float* k, const float* v, int64_t npos, int64_t kv_stride,
                    int64_t heads, int64_t kv_heads, int64_t hd, float scale, float* scores);
  void (*softmax)(float* x, int64_t rows, int64_t n);
  float (*logsumexp)(const float* x, int64_t n);
  // One head's attention probabilities p[npos] (the part of attention shared with
  // attention_backward); kg = k + g*hd, the head's KV group.
  void (*attention_probs)(float* p, const float* qh, const float* kg, int64_t npos, int64_t kv_stride, int64_t hd,
                          float scale);
  // attention_forward_group (kernels/ops/ops.h).
  void (*attention_group)(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
};

// The backward ops (kernels/ops/ops_backward.h), one entry each.
struct OpsBackwardKernels {
  void (*embedding)(float* dtable, const float* dout, const int32_t* tokens, int64_t n, int64_t dim);
  void (*rmsnorm)(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows, int64_t dim,
                  float eps);
  void (*rope)(float* dx, int64_t heads, int64_t head_dim, const float* cos, const float* sin);
  void (*swiglu)(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n);
  void (*attention)(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
                    int64_t npos, int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, float scale,
                    float* scores);
  void (*log_softmax_gather)(float* dlogits, const float* logits, const int32_t* targets, const float* dlogp,
                             int64_t rows, int64_t n);
  void (*softmax)(float* dx, const float* y, const float* dy, int64_t rows, int64_t n);
  void (*moe_route)(float* dlogits, const float* logits, const int32_t* experts, const float* dweights, int64_t rows,
                    int64_t num_experts, int64_t k, bool renormalize);
  // attention_backward_group (kernels/ops/ops_backward.h).
  void (*attention_group)(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T, int64_t p0,
                          const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride, int64_t heads,
                          int64_t kv_heads, int64_t hd, int64_t g, float scale);
};

extern const OpsKernels kOpsScalar;
extern const OpsBackwardKernels kOpsBackwardScalar;
#if defined(__x86_64__)
extern const OpsKernels kOpsAvx2;  // ops_avx2.cc
extern const OpsBackwardKernels kOpsBackwardAvx2;
extern const OpsKernels kOpsAvx512;
extern const OpsBackwardKernels kOpsBackwardAvx512;
// exp_f on 16 lanes (kernels/ops/math_avx512.h) and on 8 (math_avx2.h) over
// an array, for the tests.
void exp_avx512(float* y, const float* x, int64_t n);
void exp_avx2(float* y, const float* x, int64_t n);
#endif
const OpsKernels& ops_kernels(Backend b);  // b resolved with resolve_backend
const OpsBackwardKernels& ops_backward_kernels(Backend b);

}  // namespace mxrl::detail
