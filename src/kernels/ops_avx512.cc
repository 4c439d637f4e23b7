// ops_impl.h compiled for AVX-512 + FMA: the same operations, hardware FMA and
// whatever vectorization leaves results unchanged; SwiGLU and attention as
// explicit 16-lane kernels (exp16), bit for bit the scalar ones.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops_kernels.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "kernels/ops_impl.h"
#include "kernels/ops_backward_impl.h"
#include "kernels/math_avx512.h"

namespace mxrl::detail {
namespace {
// swiglu_impl: h = silu_f(g) * up = (g * sigmoid_f(g)) * up, 16 lanes at a time.
void swiglu_avx512(float* h, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    _mm512_storeu_ps(h + i, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid16(g)), _mm512_loadu_ps(up + i)));
  }
  swiglu_impl(h + i, gate + i, up + i, n - i);
}

// swiglu_backward_impl, 16 lanes at a time.
void swiglu_backward_avx512(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                            int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i), u = _mm512_loadu_ps(up + i), d = _mm512_loadu_ps(dh + i);
    const __m512 sg = sigmoid16(g);
    const __m512 silu = _mm512_mul_ps(g, sg);
    const __m512 dg = _mm512_mul_ps(_mm512_mul_ps(d, u),
                                    _mm512_mul_ps(sg, _mm512_add_ps(one, _mm512_mul_ps(g, _mm512_sub_ps(one, sg)))));
    _mm512_storeu_ps(dup + i, _mm512_mul_ps(d, silu));
    _mm512_storeu_ps(dgate + i, dg);
  }
  swiglu_backward_impl(dgate + i, dup + i, dh + i, gate + i, up + i, n - i);
}
}  // namespace

void exp_avx512(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f(x[i]);
}

// attention_avx512.cc: explicit vector kernels for the attention of a run.
void attention_group_avx512(float* out, const float* q, int64_t T, int64_t p0, const float* k, const float* v,
                            int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
void attention_backward_group_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t T,
                                     int64_t p0, const float* k, const float* v, int64_t kv_stride, int64_t heads,
                                     int64_t kv_heads, int64_t hd, int64_t g, float scale);
namespace {
constexpr OpsKernels with_vector_kernels(OpsKernels k) {
  k.attention_group = attention_group_avx512;
  k.swiglu = swiglu_avx512;
  return k;
}
constexpr OpsBackwardKernels with_vector_kernels(OpsBackwardKernels k) {
  k.attention_group = attention_backward_group_avx512;
  k.swiglu = swiglu_backward_avx512;
  return k;
}
}  // namespace
const OpsKernels kOpsAvx512 = with_vector_kernels(kOps);
const OpsBackwardKernels kOpsBackwardAvx512 = with_vector_kernels(kOpsBackward);
}
MXRL_END_AVX512
