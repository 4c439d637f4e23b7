// The per-backend table behind kernels/ops.h (see ops_impl.h).
#pragma once
#include <cstdint>

#include "util/cpu.h"

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
};

extern const OpsKernels kOpsScalar;
#if defined(__x86_64__)
extern const OpsKernels kOpsAvx512;
#endif
const OpsKernels& ops_kernels(Backend b);  // b resolved with resolve_backend

}  // namespace mxrl::detail
