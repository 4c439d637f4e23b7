// ops_impl.h compiled for AVX2 + FMA (Backend::Avx2, CPUs without AVX-512):
// the same operations in the same order as the scalar build, with hardware
// FMA for the scalar build's fmaf calls and whatever vectorization leaves
// results unchanged (-ffp-contract=off); bit for bit the scalar build
// (ops_test.cc, ops_backward_test.cc). SwiGLU and the attention of a run
// have explicit vector kernels (exp8; attention_avx2.cc).
#if defined(__x86_64__)
#include <immintrin.h>

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
#include "kernels/ops/math_avx2.h"

namespace mxrl::detail {
namespace {
// swiglu_impl: h = silu_f(g) * up = (g * sigmoid_f(g)) * up, 8 lanes at a time.
void swiglu_avx2(float* h, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid8(g)), _mm256_loadu_ps(up + i)));
  }
  swiglu_impl(h + i, gate + i, up + i, n - i);
}

// swiglu_backward_impl, 8 lanes at a time.
void swiglu_backward_avx2(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i), d = _mm256_loadu_ps(dh + i);
    const __m256 sg = sigmoid8(g);
    const __m256 dg = _mm256_mul_ps(_mm256_mul_ps(d, u),
                                    _mm256_mul_ps(sg, _mm256_add_ps(one, _mm256_mul_ps(g, _mm256_sub_ps(one, sg)))));
    _mm256_storeu_ps(dup + i, _mm256_mul_ps(d, _mm256_mul_ps(g, sg)));
    _mm256_storeu_ps(dgate + i, dg);
  }
  swiglu_backward_impl(dgate + i, dup + i, dh + i, gate + i, up + i, n - i);
}
}  // namespace

void exp_avx2(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f(x[i]);
}

void attention_group_avx2(float* out, const float* q, int64_t T, int64_t p0, const float* k, const float* v,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
void attention_backward_group_avx2(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t T,
                                   int64_t p0, const float* k, const float* v, int64_t kv_stride, int64_t heads,
                                   int64_t kv_heads, int64_t hd, int64_t g, float scale);
namespace {
constexpr OpsKernels with_vector_kernels(OpsKernels k) {
  k.attention_group = attention_group_avx2;
  k.swiglu = swiglu_avx2;
  return k;
}
constexpr OpsBackwardKernels with_vector_kernels(OpsBackwardKernels k) {
  k.attention_group = attention_backward_group_avx2;
  k.swiglu = swiglu_backward_avx2;
  return k;
}
}  // namespace
const OpsKernels kOpsAvx2 = with_vector_kernels(kOps);
const OpsBackwardKernels kOpsBackwardAvx2 = with_vector_kernels(kOpsBackward);
}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
