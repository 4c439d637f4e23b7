// The AVX-512 attention kernels behind attention_forward_group and
// attention_backward_group (kernels/ops/ops.h, ops_backward.h): bit for bit the
// per-token scalar reference (ops_impl.h, ops_backward_impl.h).
//
// Keys and values stay in the caller's layout (the group's position j at
// kg + j*kv_stride: rows of a [pos][kv_heads * hd] array, or a KvCache group's
// contiguous history). Each call transposes its KV group once into 16-key chunks, kt[c][d][16], so that
// one vector FMA advances 16 dot products by one d: every dot product is
// still the sequential fma chain over d that the reference computes. The
// transposition is shared by every token of the run and every head of the
// group (a training sequence: 128 tokens x 4 heads per copy). The softmax runs
// on 16 lanes with exp16 and the canonical lane sum (kernels/ops/math.h order); the
// weighted sums of values run over d in vectors, j in order.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops/math.h"
#include "kernels/ops/ops_kernels.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "kernels/ops/math_avx512.h"

namespace mxrl::detail {
namespace {

constexpr int64_t kChunk = 16;

int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }
__mmask16 valid_lanes(int64_t n, int64_t c) {
  const int64_t left = n - c * kChunk;
  return left >= kChunk ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

// r[i][d] -> r[d][i] for a 16 x 16 block of floats in registers.
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: a0 b0 a1 b1 / a2 b2 a3 b3
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], lane L: rows 4i .. 4i+3 at column 4L + j
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
    r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xDD);
  }
}

// xt[c][d][16] = x[(16c + i) * stride + d] for key 16c + i < n, zero beyond
// (hd a multiple of 16): 16 x 16 blocks transposed in registers. Pure data
// movement: the values are bit for bit those of the row layout.
void transpose_keys(std::vector<float>& xt, const float* x, int64_t n, int64_t stride, int64_t hd) {
  xt.resize(chunks(n) * hd * kChunk);
  for (int64_t c = 0; c < chunks(n); ++c) {
    float* dst = &xt[c * hd * kChunk];
    const int64_t valid = std::min<int64_t>(kChunk, n - c * kChunk);
    const float* src = x + c * kChunk * stride;
    for (int64_t d0 = 0; d0 < hd; d0 += kChunk) {
      __m512 r[16];
      for (int64_t i = 0; i < kChunk; ++i)
        r[i] = i < valid ? _mm512_loadu_ps(src + i * stride + d0) : _mm512_setzero_ps();
      transpose16x16(r);
      for (int d = 0; d < 16; ++d) _mm512_storeu_ps(dst + (d0 + d) * kChunk, r[d]);
    }
  }
}

// out_h[j] = dot_seq(a_h, x_j) * mul for j < 16 * chunks(n) (keys past n are
// the zero padding) and H heads h (a_h = a + h*as, out_h = out + h*os): two
// chunks of every head side by side (2H independent chains), each lane a
// sequential fma over d; each key vector is loaded once for all H heads.
template <int H>
void dots(float* out, int64_t os, const float* a, int64_t as, const float* xt, int64_t n, int64_t hd, float mul) {
  const __m512 vm = _mm512_set1_ps(mul);
  const int64_t nc = chunks(n);
  int64_t c = 0;
  for (; c + 2 <= nc; c += 2) {
    const float* x0 = xt + c * hd * kChunk;
    const float* x1 = x0 + hd * kChunk;
    __m512 acc0[H], acc1[H];
    for (int h = 0; h < H; ++h) acc0[h] = acc1[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 k0 = _mm512_loadu_ps(x0 + d * kChunk), k1 = _mm512_loadu_ps(x1 + d * kChunk);
      for (int h = 0; h < H; ++h) {
        const __m512 ad = _mm512_set1_ps(a[h * as + d]);
        acc0[h] = _mm512_fmadd_ps(ad, k0, acc0[h]);
        acc1[h] = _mm512_fmadd_ps(ad, k1, acc1[h]);
      }
    }
    for (int h = 0; h < H; ++h) {
      _mm512_storeu_ps(out + h * os + c * kChunk, _mm512_mul_ps(acc0[h], vm));
      _mm512_storeu_ps(out + h * os + (c + 1) * kChunk, _mm512_mul_ps(acc1[h], vm));
    }
  }
  if (c < nc) {
    const float* x0 = xt + c * hd * kChunk;
    __m512 acc0[H];
    for (int h = 0; h < H; ++h) acc0[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
      const __m512 k0 = _mm512_loadu_ps(x0 + d * kChunk);
      for (int h = 0; h < H; ++h) acc0[h] = _mm512_fmadd_ps(_mm512_set1_ps(a[h * as + d]), k0, acc0[h]);
    }
    for (int h = 0; h < H; ++h) _mm512_storeu_ps(out + h * os + c * kChunk, _mm512_mul_ps(acc0[h], vm));
  }
}

// The softmax of attention_probs_impl on 16 lanes, in place on the scaled
// dot products p[npos] (p holds 16 * chunks(npos) floats).
void softmax_lanes(float* p, int64_t npos) {
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
  for (int64_t c = 0; c < nc; ++c)
    _mm512_storeu_ps(p + c * kChunk, _mm512_div_ps(_mm512_loadu_ps(p + c * kChunk), denom));
}

// attention_probs_impl for H heads of one token: p_h = p + h*ps from query
// q + h*hd and the group's transposed keys.
template <int H>
void probs(float* p, int64_t ps, const float* q, const float* kt, int64_t npos, int64_t hd, float scale) {
  dots<H>(p, ps, q, hd, kt, npos, hd, scale);
  for (int h = 0; h < H; ++h) softmax_lanes(p + h * ps, npos);
}

// out_h[hd] = sum_j w_h[j] x_j over j < n in order (x_j at x + j*stride; w_h
// = w + h*ws, out_h = out + h*hd) for H heads, lanes over d: H*NB
// independent chains, each value vector loaded once for all heads.
template <int H, int NB>
void weighted_sum(float* out, const float* w, int64_t ws, const float* x, int64_t n, int64_t stride, int64_t hd) {
  __m512 acc[H][NB];
  for (int h = 0; h < H; ++h)
    for (int b = 0; b < NB; ++b) acc[h][b] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const float* xj = x + j * stride;
    __m512 xb[NB];
    for (int b = 0; b < NB; ++b) xb[b] = _mm512_loadu_ps(xj + b * kChunk);
    for (int h = 0; h < H; ++h) {
      const __m512 wj = _mm512_set1_ps(w[h * ws + j]);
      for (int b = 0; b < NB; ++b) acc[h][b] = _mm512_fmadd_ps(wj, xb[b], acc[h][b]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(out + h * hd + b * kChunk, acc[h][b]);
}

// weighted_sum for H heads and any hd (a multiple of 16), at most 16 accumulators per pass.
template <int H>
void weighted_sum_any(float* out, const float* w, int64_t ws, const float* x, int64_t n, int64_t stride, int64_t hd) {
  if constexpr (H > 1) {
    if (H * (hd / kChunk) > 16) {  // two passes of H/2 heads
      weighted_sum_any<H / 2>(out, w, ws, x, n, stride, hd);
      weighted_sum_any<H / 2>(out + H / 2 * hd, w + H / 2 * ws, ws, x, n, stride, hd);
      return;
    }
  }
  switch (hd / kChunk) {
    case 1: return weighted_sum<H, 1>(out, w, ws, x, n, stride, hd);
    case 2: return weighted_sum<H, 2>(out, w, ws, x, n, stride, hd);
    case 4: return weighted_sum<H, 4>(out, w, ws, x, n, stride, hd);
    case 8:
      if constexpr (H <= 2)
        return weighted_sum<H, 8>(out, w, ws, x, n, stride, hd);
      else
        break;
    case 16:
      if constexpr (H == 1)
        return weighted_sum<1, 16>(out, w, ws, x, n, stride, hd);
      else
        break;
    default: break;
  }
  for (int h = 0; h < H; ++h)  // other widths: one head and 16 lanes of d at a time
    for (int64_t b = 0; b < hd; b += kChunk)
      weighted_sum<1, 1>(out + h * hd + b, w + h * ws, 0, x + b, n, stride, kChunk);
}

// y_j[hd] = fma(w_h[j], a_h[hd], y_j) for j < n and the H heads in order
// (y_j at y + j*stride, w_h = w + h*ws, a_h = a + h*hd), in place: per
// element the same sequence of fmas as H passes of one head, one load and
// store of y_j.
template <int H>
void axpy_rows(float* y, const float* w, int64_t ws, const float* a, int64_t n, int64_t stride, int64_t hd) {
  for (int64_t j = 0; j < n; ++j) {
    float* yj = y + j * stride;
    for (int64_t b = 0; b < hd; b += kChunk) {
      __m512 acc = _mm512_loadu_ps(yj + b);
      for (int h = 0; h < H; ++h)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(w[h * ws + j]), _mm512_loadu_ps(a + h * hd + b), acc);
      _mm512_storeu_ps(yj + b, acc);
    }
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

namespace {
// Token t of a run, heads [h0, h0 + H) of KV group g (p holds H rows of cap).
template <int H>
void forward_heads(float* out, const float* q, int64_t t, int64_t p0, const float* vg, int64_t kv_stride, int64_t heads,
                   int64_t hd, int64_t h0, float scale, int64_t cap, Scratch& s) {
  const int64_t r = (t * heads + h0) * hd, npos = p0 + t + 1;
  probs<H>(s.p.data(), cap, q + r, s.kt.data(), npos, hd, scale);
  weighted_sum_any<H>(out + r, s.p.data(), cap, vg, npos, kv_stride, hd);
}

template <int H>
void backward_heads(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t t, int64_t p0,
                    const float* kg, int64_t kv_stride, int64_t dkv_stride, int64_t heads, int64_t hd, int64_t h0,
                    float scale, int64_t cap, Scratch& s) {
  const __m512 vscale = _mm512_set1_ps(scale);
  const int64_t r = (t * heads + h0) * hd, npos = p0 + t + 1;
  float *p = s.p.data(), *dp = s.dp.data(), *ds = s.ds.data(), *sds = s.sds.data();
  probs<H>(p, cap, q + r, s.kt.data(), npos, hd, scale);
  dots<H>(dp, cap, dout + r, hd, s.vt.data(), npos, hd, 1.0f);  // dp_j = dot_seq(dout_h, v_j) (times 1: exact)
  float dsum[H];
  for (int h = 0; h < H; ++h) dsum[h] = 0.0f;
  for (int64_t j = 0; j < npos; ++j)  // H sequential chains side by side
    for (int h = 0; h < H; ++h) dsum[h] = __builtin_fmaf(p[h * cap + j], dp[h * cap + j], dsum[h]);
  axpy_rows<H>(dvg, p, cap, dout + r, npos, dkv_stride, hd);  // dv_j += p_j dout_h, heads in order
  for (int h = 0; h < H; ++h) {
    const __m512 vsum = _mm512_set1_ps(dsum[h]);
    for (int64_t c = 0; c < chunks(npos); ++c) {
      const int64_t i = h * cap + c * kChunk;
      const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(p + i), _mm512_sub_ps(_mm512_loadu_ps(dp + i), vsum));
      _mm512_storeu_ps(ds + i, d);
      _mm512_storeu_ps(sds + i, _mm512_mul_ps(vscale, d));
    }
  }
  weighted_sum_any<H>(dq + r, ds, cap, kg, npos, kv_stride, hd);  // dq_h = sum_j ds_j k_j
  for (int64_t b = 0; b < H * hd; b += kChunk)
    _mm512_storeu_ps(dq + r + b, _mm512_mul_ps(_mm512_loadu_ps(dq + r + b), vscale));
  axpy_rows<H>(dkg, sds, cap, q + r, npos, dkv_stride, hd);  // dk_j += (scale ds_j) q_h, heads in order
}
}  // namespace

// Token by token (dk and dv accumulate over tokens, then heads, in the
// reference's order), the group's heads in blocks of 4, 2 and 1.
void attention_group_avx512(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                            int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  if (hd % kChunk != 0)
    return kOpsScalar.attention_group(out, q, T, p0, kg, vg, kv_stride, heads, kv_heads, hd, g, scale);
  const int64_t group = heads / kv_heads, n = p0 + T, h1 = (g + 1) * group, cap = chunks(n) * kChunk;
  Scratch& s = scratch();
  transpose_keys(s.kt, kg, n, kv_stride, hd);
  s.p.resize(4 * cap);
  for (int64_t t = 0; t < T; ++t) {
    int64_t h = g * group;
    for (; h + 4 <= h1; h += 4) forward_heads<4>(out, q, t, p0, vg, kv_stride, heads, hd, h, scale, cap, s);
    for (; h + 2 <= h1; h += 2) forward_heads<2>(out, q, t, p0, vg, kv_stride, heads, hd, h, scale, cap, s);
    for (; h < h1; ++h) forward_heads<1>(out, q, t, p0, vg, kv_stride, heads, hd, h, scale, cap, s);
  }
}

void attention_backward_group_avx512(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                                     int64_t p0, const float* kg, const float* vg, int64_t kv_stride,
                                     int64_t dkv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g,
                                     float scale) {
  if (hd % kChunk != 0)
    return kOpsBackwardScalar.attention_group(dq, dkg, dvg, dout, q, T, p0, kg, vg, kv_stride, dkv_stride, heads,
                                              kv_heads, hd, g, scale);
  const int64_t group = heads / kv_heads, n = p0 + T, h1 = (g + 1) * group, cap = chunks(n) * kChunk;
  Scratch& s = scratch();
  transpose_keys(s.kt, kg, n, kv_stride, hd);
  transpose_keys(s.vt, vg, n, kv_stride, hd);
  s.p.resize(4 * cap), s.dp.resize(4 * cap), s.ds.resize(4 * cap), s.sds.resize(4 * cap);
  for (int64_t t = 0; t < T; ++t) {
    int64_t h = g * group;
    for (; h + 4 <= h1; h += 4)
      backward_heads<4>(dq, dkg, dvg, dout, q, t, p0, kg, kv_stride, dkv_stride, heads, hd, h, scale, cap, s);
    for (; h + 2 <= h1; h += 2)
      backward_heads<2>(dq, dkg, dvg, dout, q, t, p0, kg, kv_stride, dkv_stride, heads, hd, h, scale, cap, s);
    for (; h < h1; ++h)
      backward_heads<1>(dq, dkg, dvg, dout, q, t, p0, kg, kv_stride, dkv_stride, heads, hd, h, scale, cap, s);
  }
}

}  // namespace mxrl::detail
MXRL_END_AVX512
