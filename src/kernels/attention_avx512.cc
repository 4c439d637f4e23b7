// The AVX-512 attention kernels behind attention_forward_group and
// attention_backward_group (kernels/ops.h, ops_backward.h): bit for bit the
// per-token scalar reference (ops_impl.h, ops_backward_impl.h).
//
// Keys and values stay in the cache's row layout ([pos][kv_heads * hd]). Each
// call transposes its KV group once into 16-key chunks, kt[c][d][16], so that
// one vector FMA advances 16 dot products by one d: every dot product is
// still the sequential fma chain over d that the reference computes. The
// transposition is shared by every token of the run and every head of the
// group (a training sequence: 128 tokens x 4 heads per copy). The softmax runs
// on 16 lanes with exp16 and the canonical lane sum (kernels/math.h order); the
// weighted sums of values run over d in vectors, j in order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/math.h"
#include "kernels/ops_kernels.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "kernels/math_avx512.h"

namespace mxrl::detail {
namespace {

constexpr int64_t kChunk = 16;

int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }
__mmask16 valid_lanes(int64_t n, int64_t c) {
  const int64_t left = n - c * kChunk;
  return left >= kChunk ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

// xt[c][d][16] = x[(16c + i) * stride + d] for key 16c + i < n, zero beyond.
void transpose_keys(std::vector<float>& xt, const float* x, int64_t n, int64_t stride, int64_t hd) {
  xt.resize(chunks(n) * hd * kChunk);
  for (int64_t c = 0; c < chunks(n); ++c) {
    float* dst = &xt[c * hd * kChunk];
    for (int64_t i = 0; i < kChunk; ++i) {
      const int64_t j = c * kChunk + i;
      if (j < n) {
        const float* src = x + j * stride;
        for (int64_t d = 0; d < hd; ++d) dst[d * kChunk + i] = src[d];
      } else {
        for (int64_t d = 0; d < hd; ++d) dst[d * kChunk + i] = 0.0f;
      }
    }
  }
}

// out[j] = dot_seq(a, x_j) * mul for j < 16 * chunks(n) (keys past n are the
// zero padding): two chunks side by side, each lane a sequential fma over d.
void dots(float* out, const float* a, const float* xt, int64_t n, int64_t hd, float mul) {
  const __m512 vm = _mm512_set1_ps(mul);
  const int64_t nc = chunks(n);
  int64_t c = 0;
  for (; c + 2 <= nc; c += 2) {
    const float* x0 = xt + c * hd * kChunk;
    const float* x1 = x0 + hd * kChunk;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 ad = _mm512_set1_ps(a[d]);
      acc0 = _mm512_fmadd_ps(ad, _mm512_loadu_ps(x0 + d * kChunk), acc0);
      acc1 = _mm512_fmadd_ps(ad, _mm512_loadu_ps(x1 + d * kChunk), acc1);
    }
    _mm512_storeu_ps(out + c * kChunk, _mm512_mul_ps(acc0, vm));
    _mm512_storeu_ps(out + (c + 1) * kChunk, _mm512_mul_ps(acc1, vm));
  }
  if (c < nc) {
    const float* x0 = xt + c * hd * kChunk;
    __m512 acc0 = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) acc0 = _mm512_fmadd_ps(_mm512_set1_ps(a[d]), _mm512_loadu_ps(x0 + d * kChunk), acc0);
    _mm512_storeu_ps(out + c * kChunk, _mm512_mul_ps(acc0, vm));
  }
}

// attention_probs_impl on 16 lanes: p[npos] from the head's query and the
// group's transposed keys. p must hold 16 * chunks(npos) floats.
void probs(float* p, const float* qh, const float* kt, int64_t npos, int64_t hd, float scale) {
  dots(p, qh, kt, npos, hd, scale);
  const int64_t nc = chunks(npos);
  // max: m = (m < p_j) ? p_j : m per lane, then over the lanes (std::max's
  // NaN-skipping rule; only the sign of a zero maximum can differ from the
  // sequential scan, and x - (+0) equals x - (-0) for every x exp_f sees).
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int64_t c = 0; c < nc; ++c) {
    const __m512 x = _mm512_loadu_ps(p + c * kChunk);
    mv = _mm512_mask_mov_ps(mv, _mm512_mask_cmp_ps_mask(valid_lanes(npos, c), mv, x, _CMP_LT_OQ), x);
  }
  alignas(64) float lanes[kChunk];
  _mm512_store_ps(lanes, mv);
  float m = -INFINITY;
  for (float x : lanes) m = std::max(m, x);
  const __m512 vmax = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < nc; ++c) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p + c * kChunk), vmax));
    _mm512_storeu_ps(p + c * kChunk, e);
    acc = _mm512_mask_add_ps(acc, valid_lanes(npos, c), acc, e);
  }
  const __m512 denom = _mm512_set1_ps(lane_tree16(acc));
  for (int64_t c = 0; c < nc; ++c) _mm512_storeu_ps(p + c * kChunk, _mm512_div_ps(_mm512_loadu_ps(p + c * kChunk), denom));
}

// out[hd] = sum_j w_j x_j over j < n in order (x_j at x + j*stride), lanes over d.
template <int NB>
void weighted_sum(float* out, const float* w, const float* x, int64_t n, int64_t stride) {
  __m512 acc[NB];
  for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    const float* xj = x + j * stride;
    for (int b = 0; b < NB; ++b) acc[b] = _mm512_fmadd_ps(wj, _mm512_loadu_ps(xj + b * kChunk), acc[b]);
  }
  for (int b = 0; b < NB; ++b) _mm512_storeu_ps(out + b * kChunk, acc[b]);
}

void weighted_sum_any(float* out, const float* w, const float* x, int64_t n, int64_t stride, int64_t hd) {
  switch (hd / kChunk) {
    case 1: return weighted_sum<1>(out, w, x, n, stride);
    case 2: return weighted_sum<2>(out, w, x, n, stride);
    case 4: return weighted_sum<4>(out, w, x, n, stride);
    case 8: return weighted_sum<8>(out, w, x, n, stride);
    default:
      for (int64_t b = 0; b < hd; b += kChunk) weighted_sum<1>(out + b, w, x + b, n, stride);
  }
}

// y_j[hd] = fma(w_j, a[hd], y_j) for j < n (y_j at y + j*stride), in place.
void axpy_rows(float* y, const float* w, const float* a, int64_t n, int64_t stride, int64_t hd) {
  for (int64_t j = 0; j < n; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    float* yj = y + j * stride;
    for (int64_t b = 0; b < hd; b += kChunk)
      _mm512_storeu_ps(yj + b, _mm512_fmadd_ps(wj, _mm512_loadu_ps(a + b), _mm512_loadu_ps(yj + b)));
  }
}

struct Scratch {
  std::vector<float> kt, vt, p, dp, ds, sds;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void attention_group_avx512(float* out, const float* q, int64_t T, int64_t p0, const float* k, const float* v,
                            int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  if (hd % kChunk != 0)
    return kOpsScalar.attention_group(out, q, T, p0, k, v, kv_stride, heads, kv_heads, hd, g, scale);
  const int64_t group = heads / kv_heads, n = p0 + T;
  Scratch& s = scratch();
  transpose_keys(s.kt, k + g * hd, n, kv_stride, hd);
  s.p.resize(chunks(n) * kChunk);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t r = (t * heads + h) * hd, npos = p0 + t + 1;
      probs(s.p.data(), q + r, s.kt.data(), npos, hd, scale);
      weighted_sum_any(out + r, s.p.data(), v + g * hd, npos, kv_stride, hd);
    }
}

void attention_backward_group_avx512(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t T,
                                     int64_t p0, const float* k, const float* v, int64_t kv_stride, int64_t heads,
                                     int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  if (hd % kChunk != 0)
    return kOpsBackwardScalar.attention_group(dq, dk, dv, dout, q, T, p0, k, v, kv_stride, heads, kv_heads, hd, g,
                                              scale);
  const int64_t group = heads / kv_heads, n = p0 + T;
  Scratch& s = scratch();
  transpose_keys(s.kt, k + g * hd, n, kv_stride, hd);
  transpose_keys(s.vt, v + g * hd, n, kv_stride, hd);
  const int64_t cap = chunks(n) * kChunk;
  s.p.resize(cap), s.dp.resize(cap), s.ds.resize(cap), s.sds.resize(cap);
  const float *kg = k + g * hd;
  float *dkg = dk + g * hd, *dvg = dv + g * hd;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t r = (t * heads + h) * hd, npos = p0 + t + 1;
      float *p = s.p.data(), *dp = s.dp.data(), *ds = s.ds.data(), *sds = s.sds.data();
      probs(p, q + r, s.kt.data(), npos, hd, scale);
      dots(dp, dout + r, s.vt.data(), npos, hd, 1.0f);  // dp_j = dot_seq(dout_h, v_j) (times 1: exact)
      float dsum = 0.0f;
      for (int64_t j = 0; j < npos; ++j) dsum = __builtin_fmaf(p[j], dp[j], dsum);
      axpy_rows(dvg, p, dout + r, npos, kv_stride, hd);  // dv_j += p_j dout_h
      const __m512 vsum = _mm512_set1_ps(dsum), vscale = _mm512_set1_ps(scale);
      for (int64_t c = 0; c < chunks(npos); ++c) {
        const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(p + c * kChunk),
                                       _mm512_sub_ps(_mm512_loadu_ps(dp + c * kChunk), vsum));
        _mm512_storeu_ps(ds + c * kChunk, d);
        _mm512_storeu_ps(sds + c * kChunk, _mm512_mul_ps(vscale, d));
      }
      weighted_sum_any(dq + r, ds, kg, npos, kv_stride, hd);  // dq_h = sum_j ds_j k_j
      for (int64_t b = 0; b < hd; b += kChunk)
        _mm512_storeu_ps(dq + r + b, _mm512_mul_ps(_mm512_loadu_ps(dq + r + b), vscale));
      axpy_rows(dkg, sds, q + r, npos, kv_stride, hd);  // dk_j += (scale ds_j) q_h
    }
}

}  // namespace mxrl::detail
MXRL_END_AVX512
