// ops_impl.h compiled for AVX2 + FMA (Backend::Avx2, CPUs without AVX-512):
// the same operations in the same order as the scalar build, with hardware
// FMA for the scalar build's fmaf calls and whatever vectorization leaves
// results unchanged (-ffp-contract=off); bit for bit the scalar build
// (ops_test.cc, ops_backward_test.cc). The attention of a run has explicit
// vector kernels (attention_avx2.cc).
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops/ops_kernels.h"
#include "util/target_avx2.h"

MXRL_BEGIN_AVX2
#include "kernels/ops/ops_backward_impl.h"
#include "kernels/ops/ops_impl.h"

namespace mxrl::detail {
void attention_group_avx2(float* out, const float* q, int64_t T, int64_t p0, const float* k, const float* v,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
void attention_backward_group_avx2(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t T,
                                   int64_t p0, const float* k, const float* v, int64_t kv_stride, int64_t heads,
                                   int64_t kv_heads, int64_t hd, int64_t g, float scale);
namespace {
constexpr OpsKernels with_vector_kernels(OpsKernels k) {
  k.attention_group = attention_group_avx2;
  return k;
}
constexpr OpsBackwardKernels with_vector_kernels(OpsBackwardKernels k) {
  k.attention_group = attention_backward_group_avx2;
  return k;
}
}  // namespace
const OpsKernels kOpsAvx2 = with_vector_kernels(kOps);
const OpsBackwardKernels kOpsBackwardAvx2 = with_vector_kernels(kOpsBackward);
}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
