// ops_impl.h compiled for AVX-512 + FMA: the same operations, hardware FMA and
// whatever vectorization leaves results unchanged; SwiGLU and attention as
// explicit 16-lane kernels (exp16), bit for bit the scalar ones.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops/ops_kernels.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "kernels/ops/math_avx512.h"
#include "kernels/ops/ops_backward_impl.h"
#include "kernels/ops/ops_impl.h"

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
void swiglu_backward_avx512(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n) {
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
inline __mmask16 tail16(int64_t left) { return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1); }

// inv = 1 / sqrt(sumsq_canonical(x) / dim + eps): lane l accumulates x[i]^2
// for i = l (mod 16) as an fma chain, then lane_tree, as the scalar code.
inline float rms_inv(const float* x, int64_t dim, float eps) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < dim; i += 16) {
    const __mmask16 k = tail16(dim - i);
    const __m512 xv = _mm512_maskz_loadu_ps(k, x + i);
    acc = _mm512_mask3_fmadd_ps(xv, xv, acc, k);
  }
  const float var = lane_tree16(acc) / static_cast<float>(dim);
  return 1.0f / __builtin_sqrtf(var + eps);
}

// rmsnorm_impl: y = w * (x * inv), 16 lanes at a time.
void rmsnorm_avx512(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const __m512 inv = _mm512_set1_ps(rms_inv(xr, dim, eps));
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 k = tail16(dim - i);
      _mm512_mask_storeu_ps(
          yr + i, k,
          _mm512_mul_ps(_mm512_maskz_loadu_ps(k, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + i), inv)));
    }
  }
}

// rmsnorm_backward_impl: the same lanes for the mean of dy*w*xhat, dw as an
// fma per element and row, dx = inv * (dy*w - xhat*mean).
void rmsnorm_backward_avx512(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows,
                             int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const __m512 inv = _mm512_set1_ps(rms_inv(xr, dim, eps));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 k = tail16(dim - i);
      const __m512 xhat = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + i), inv);
      const __m512 d = _mm512_maskz_loadu_ps(k, dyr + i);
      acc = _mm512_mask3_fmadd_ps(_mm512_mul_ps(d, _mm512_maskz_loadu_ps(k, w + i)), xhat, acc, k);
      if (dw) _mm512_mask_storeu_ps(dw + i, k, _mm512_fmadd_ps(d, xhat, _mm512_maskz_loadu_ps(k, dw + i)));
    }
    const __m512 mean = _mm512_set1_ps(lane_tree16(acc) / static_cast<float>(dim));
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 k = tail16(dim - i);
      const __m512 xhat = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + i), inv);
      const __m512 dyw = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dyr + i), _mm512_maskz_loadu_ps(k, w + i));
      _mm512_mask_storeu_ps(dxr + i, k, _mm512_mul_ps(inv, _mm512_sub_ps(dyw, _mm512_mul_ps(xhat, mean))));
    }
  }
}
}  // namespace

void exp_avx512(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f(x[i]);
}

// attention_avx512.cc: explicit vector kernels for the attention of a run.
void attention_group_avx512(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                            int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
void attention_backward_group_avx512(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                                     int64_t p0, const float* kg, const float* vg, int64_t kv_stride,
                                     int64_t dkv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g,
                                     float scale);
namespace {
constexpr OpsKernels with_vector_kernels(OpsKernels k) {
  k.attention_group = attention_group_avx512;
  k.swiglu = swiglu_avx512;
  k.rmsnorm = rmsnorm_avx512;
  return k;
}
constexpr OpsBackwardKernels with_vector_kernels(OpsBackwardKernels k) {
  k.attention_group = attention_backward_group_avx512;
  k.swiglu = swiglu_backward_avx512;
  k.rmsnorm = rmsnorm_backward_avx512;
  return k;
}
}  // namespace
const OpsKernels kOpsAvx512 = with_vector_kernels(kOps);
const OpsBackwardKernels kOpsBackwardAvx512 = with_vector_kernels(kOpsBackward);
}  // namespace mxrl::detail
MXRL_END_AVX512
