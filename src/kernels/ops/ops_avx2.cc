// ops_impl.h compiled for AVX2 + FMA (Backend::Avx2, CPUs without AVX-512):
// the same operations in the same order as the scalar build, with hardware
// FMA for the scalar build's fmaf calls and whatever vectorization leaves
// results unchanged (-ffp-contract=off); bit for bit the scalar build
// (ops_test.cc, ops_backward_test.cc). SwiGLU, RMSNorm and the attention of
// a run have explicit vector kernels (exp8; attention_avx2.cc).
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

// The 16 lanes of the scalar code's acc[i % 16] as two vectors (lanes 0-7,
// 8-15) for i below dim / 16 * 16; the rest of a row goes on in the scalar
// lanes. Returns lane_tree(acc): its first level is lo + hi.
struct Lanes16 {
  __m256 lo, hi;
  alignas(32) float acc[16];
};
inline void zero(Lanes16& l) { l.lo = l.hi = _mm256_setzero_ps(); }
inline float* spill(Lanes16& l) {
  _mm256_store_ps(l.acc, l.lo);
  _mm256_store_ps(l.acc + 8, l.hi);
  return l.acc;
}

// inv = 1 / sqrt(sumsq_canonical(x) / dim + eps), as the scalar code.
inline float rms_inv(const float* x, int64_t dim, int64_t dv, float eps) {
  Lanes16 l;
  zero(l);
  for (int64_t i = 0; i < dv; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    l.lo = _mm256_fmadd_ps(a, a, l.lo);
    l.hi = _mm256_fmadd_ps(b, b, l.hi);
  }
  float* acc = spill(l);
  for (int64_t i = dv; i < dim; ++i) acc[i % 16] = __builtin_fmaf(x[i], x[i], acc[i % 16]);
  const float var = lane_tree(acc) / static_cast<float>(dim);
  return 1.0f / __builtin_sqrtf(var + eps);
}

// rmsnorm_impl: y = w * (x * inv), 8 lanes at a time.
void rmsnorm_avx2(float* y, const float* x, const float* w, int64_t rows, int64_t dim, float eps) {
  const int64_t dv = dim / 16 * 16, d8 = dim / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float inv = rms_inv(xr, dim, dv, eps);
    const __m256 iv = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i < d8; i += 8)
      _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(xr + i), iv)));
    for (; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

// rmsnorm_backward_impl: the mean of dy*w*xhat in the scalar code's 16 lanes,
// dw as an fma per element and row, dx = inv * (dy*w - xhat*mean).
void rmsnorm_backward_avx2(float* dx, float* dw, const float* dy, const float* x, const float* w, int64_t rows,
                           int64_t dim, float eps) {
  const int64_t dv = dim / 16 * 16, d8 = dim / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const float inv = rms_inv(xr, dim, dv, eps);
    const __m256 iv = _mm256_set1_ps(inv);
    Lanes16 l;
    zero(l);
    for (int64_t i = 0; i < dv; i += 16)
      for (int h = 0; h < 2; ++h) {
        const int64_t j = i + 8 * h;
        const __m256 xhat = _mm256_mul_ps(_mm256_loadu_ps(xr + j), iv), d = _mm256_loadu_ps(dyr + j);
        __m256& a = h == 0 ? l.lo : l.hi;
        a = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_loadu_ps(w + j)), xhat, a);
        if (dw) _mm256_storeu_ps(dw + j, _mm256_fmadd_ps(d, xhat, _mm256_loadu_ps(dw + j)));
      }
    float* acc = spill(l);
    for (int64_t i = dv; i < dim; ++i) {
      const float xhat = xr[i] * inv;
      acc[i % 16] = __builtin_fmaf(dyr[i] * w[i], xhat, acc[i % 16]);
      if (dw) dw[i] = __builtin_fmaf(dyr[i], xhat, dw[i]);
    }
    const float mean = lane_tree(acc) / static_cast<float>(dim);
    const __m256 mv = _mm256_set1_ps(mean);
    int64_t i = 0;
    for (; i < d8; i += 8) {
      const __m256 xhat = _mm256_mul_ps(_mm256_loadu_ps(xr + i), iv);
      const __m256 dyw = _mm256_mul_ps(_mm256_loadu_ps(dyr + i), _mm256_loadu_ps(w + i));
      _mm256_storeu_ps(dxr + i, _mm256_mul_ps(iv, _mm256_sub_ps(dyw, _mm256_mul_ps(xhat, mv))));
    }
    for (; i < dim; ++i) dxr[i] = inv * (dyr[i] * w[i] - (xr[i] * inv) * mean);
  }
}
}  // namespace

void exp_avx2(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = exp_f(x[i]);
}

void attention_group_avx2(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
void attention_backward_group_avx2(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                                   int64_t p0, const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride,
                                   int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale);
namespace {
constexpr OpsKernels with_vector_kernels(OpsKernels k) {
  k.attention_group = attention_group_avx2;
  k.swiglu = swiglu_avx2;
  k.rmsnorm = rmsnorm_avx2;
  return k;
}
constexpr OpsBackwardKernels with_vector_kernels(OpsBackwardKernels k) {
  k.attention_group = attention_backward_group_avx2;
  k.swiglu = swiglu_backward_avx2;
  k.rmsnorm = rmsnorm_backward_avx2;
  return k;
}
}  // namespace
const OpsKernels kOpsAvx2 = with_vector_kernels(kOps);
const OpsBackwardKernels kOpsBackwardAvx2 = with_vector_kernels(kOpsBackward);
}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
