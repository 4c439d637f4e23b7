// The AVX2 attention kernels behind attention_forward_group and
// attention_backward_group (Backend::Avx2): bit for bit the per-token scalar
// reference (ops_impl.h, ops_backward_impl.h), with the steps of
// attention_avx512.cc on pairs of 8-lane vectors.
//
// Each call transposes its KV group once into 16-key chunks, kt[c][d][16]
// (8 x 8 blocks transposed in registers), so that one pair of vector FMAs
// advances 16 dot products by one d: every dot product is still the
// sequential fma chain over d of the reference. Several (head, chunk) slots
// run side by side so that enough independent chains hide the FMA latency.
// The softmax runs on 16 lanes with exp8 and the canonical 16-lane sum
// (kernels/ops/math.h order); the weighted sums of values run over d in
// vectors, j in order.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops/math.h"
#include "kernels/ops/ops_kernels.h"
#include "util/target_avx2.h"

namespace mxrl::detail {
namespace {
constexpr int64_t kChunk = 16;  // keys per chunk: the canonical sum's 16 lanes
int64_t chunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

struct Scratch {
  std::vector<float> kt, vt, p, dp, ds, sds;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
}  // namespace
}  // namespace mxrl::detail

MXRL_BEGIN_AVX2
#include "kernels/ops/math_avx2.h"
#include "kernels/transpose/transpose_avx2.h"

namespace mxrl::detail {
namespace {

// 16 lanes as two 8-lane halves.
struct V16 {
  __m256 lo, hi;
};
inline V16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void store16(float* p, V16 v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
inline V16 fma16(__m256 a, V16 b, V16 c) { return {_mm256_fmadd_ps(a, b.lo, c.lo), _mm256_fmadd_ps(a, b.hi, c.hi)}; }
inline V16 mul16(V16 a, __m256 b) { return {_mm256_mul_ps(a.lo, b), _mm256_mul_ps(a.hi, b)}; }
// Lanes of chunk c below n, as all-ones masks.
inline V16 valid16(int64_t n, int64_t c) {
  const __m256i left = _mm256_set1_epi32(static_cast<int>(std::min<int64_t>(kChunk, n - c * kChunk)));
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return {_mm256_castsi256_ps(_mm256_cmpgt_epi32(left, lane)),
          _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, _mm256_add_epi32(lane, _mm256_set1_epi32(8))))};
}

inline V16 exp16(V16 x) { return {exp8(x.lo), exp8(x.hi)}; }

// xt[c][d][16] = x[(16c + i) * stride + d] for key 16c + i < n, zero beyond
// (hd a multiple of 8). Pure data movement: the values of the row layout.
void transpose_keys(std::vector<float>& xt, const float* x, int64_t n, int64_t stride, int64_t hd) {
  xt.resize(chunks(n) * hd * kChunk);
  for (int64_t c = 0; c < chunks(n); ++c) {
    float* dst = &xt[c * hd * kChunk];
    for (int64_t half = 0; half < 2; ++half) {
      const int64_t k0 = c * kChunk + 8 * half, valid = std::clamp<int64_t>(n - k0, 0, 8);
      for (int64_t d0 = 0; d0 < hd; d0 += 8) {
        __m256 r[8];
        for (int64_t i = 0; i < 8; ++i)
          r[i] = i < valid ? _mm256_loadu_ps(x + (k0 + i) * stride + d0) : _mm256_setzero_ps();
        transpose8x8(r);
        for (int d = 0; d < 8; ++d) _mm256_storeu_ps(dst + (d0 + d) * kChunk + 8 * half, r[d]);
      }
    }
  }
}

// out_h[16c' ..] = dot_seq(a_h, x_j) * mul for H heads and chunks c' in
// [c, c + C): the H * C (head, chunk) slots side by side, each lane a
// sequential fma over d.
template <int H, int C>
void dots_block(float* out, int64_t os, const float* a, int64_t as, const float* xt, int64_t c, int64_t hd,
                __m256 vm) {
  static_assert(H * C <= 4, "at most 8 chains of 8 lanes");
  V16 s0{}, s1{}, s2{}, s3{};  // slot i: head i / C, chunk c + i % C
  const float* x = xt + c * hd * kChunk;
  for (int64_t d = 0; d < hd; ++d) {
    const V16 k0 = load16(x + d * kChunk);
    const V16 k1 = C > 1 ? load16(x + (hd + d) * kChunk) : k0;
    const V16 k2 = C > 2 ? load16(x + (2 * hd + d) * kChunk) : k0;
    const V16 k3 = C > 3 ? load16(x + (3 * hd + d) * kChunk) : k0;
    const V16 kc[4] = {k0, k1, k2, k3};
    const __m256 a0 = _mm256_broadcast_ss(a + d);
    s0 = fma16(a0, k0, s0);
    if constexpr (H * C > 1) s1 = fma16(C > 1 ? a0 : _mm256_broadcast_ss(a + as + d), kc[1 % C], s1);
    if constexpr (H * C > 2) s2 = fma16(C > 2 ? a0 : _mm256_broadcast_ss(a + (2 / C) * as + d), kc[2 % C], s2);
    if constexpr (H * C > 3) s3 = fma16(C > 3 ? a0 : _mm256_broadcast_ss(a + (3 / C) * as + d), kc[3 % C], s3);
  }
  const V16 s[4] = {s0, s1, s2, s3};
  for (int i = 0; i < H * C; ++i) store16(out + (i / C) * os + (c + i % C) * kChunk, mul16(s[i], vm));
}

// out_h[j] = dot_seq(a_h, x_j) * mul for j < 16 * chunks(n) (keys past n are
// the zero padding) and H heads h (a_h = a + h*as, out_h = out + h*os).
template <int H>
void dots(float* out, int64_t os, const float* a, int64_t as, const float* xt, int64_t n, int64_t hd, float mul) {
  const __m256 vm = _mm256_set1_ps(mul);
  const int64_t nc = chunks(n);
  constexpr int C = 4 / H;  // chunks per block: 4, 2, 1 for 1, 2, 4 heads
  int64_t c = 0;
  for (; c + C <= nc; c += C) dots_block<H, C>(out, os, a, as, xt, c, hd, vm);
  for (; c < nc; ++c) dots_block<H, 1>(out, os, a, as, xt, c, hd, vm);
}

// The softmax of attention_probs_impl on 16 lanes, in place on the scaled
// dot products p[npos] (p holds 16 * chunks(npos) floats).
void softmax_lanes(float* p, int64_t npos) {
  const int64_t nc = chunks(npos);
  // max: m = (m < p_j) ? p_j : m per lane, then over the lanes (std::max's
  // NaN-skipping rule; only the sign of a zero maximum can differ from the
  // sequential scan, and x - (+0) equals x - (-0) for every x exp_f sees).
  V16 mv = {_mm256_set1_ps(-INFINITY), _mm256_set1_ps(-INFINITY)};
  for (int64_t c = 0; c < nc; ++c) {
    const V16 x = load16(p + c * kChunk), ok = valid16(npos, c);
    mv.lo = _mm256_blendv_ps(mv.lo, x.lo, _mm256_and_ps(ok.lo, _mm256_cmp_ps(mv.lo, x.lo, _CMP_LT_OQ)));
    mv.hi = _mm256_blendv_ps(mv.hi, x.hi, _mm256_and_ps(ok.hi, _mm256_cmp_ps(mv.hi, x.hi, _CMP_LT_OQ)));
  }
  alignas(32) float lanes[kChunk];
  store16(lanes, mv);
  float m = -INFINITY;
  for (float x : lanes) m = std::max(m, x);
  const __m256 vmax = _mm256_set1_ps(m);
  V16 acc{};
  for (int64_t c = 0; c < nc; ++c) {
    const V16 x = load16(p + c * kChunk), ok = valid16(npos, c);
    const V16 e = exp16({_mm256_sub_ps(x.lo, vmax), _mm256_sub_ps(x.hi, vmax)});
    store16(p + c * kChunk, e);
    acc.lo = _mm256_blendv_ps(acc.lo, _mm256_add_ps(acc.lo, e.lo), ok.lo);
    acc.hi = _mm256_blendv_ps(acc.hi, _mm256_add_ps(acc.hi, e.hi), ok.hi);
  }
  store16(lanes, acc);
  const __m256 denom = _mm256_set1_ps(lane_tree(lanes));
  for (int64_t c = 0; c < nc; ++c) {
    const V16 x = load16(p + c * kChunk);
    store16(p + c * kChunk, {_mm256_div_ps(x.lo, denom), _mm256_div_ps(x.hi, denom)});
  }
}

// attention_probs_impl for H heads of one token: p_h = p + h*ps from query
// q + h*hd and the group's transposed keys.
template <int H>
void probs(float* p, int64_t ps, const float* q, const float* kt, int64_t npos, int64_t hd, float scale) {
  dots<H>(p, ps, q, hd, kt, npos, hd, scale);
  for (int h = 0; h < H; ++h) softmax_lanes(p + h * ps, npos);
}

// out[hd] = sum_j w[j] x_j over j < n in order (x_j at x + j*stride), for
// NB * 8 lanes of d from d0: NB independent chains, one head.
template <int NB>
void weighted_sum_block(float* out, const float* w, const float* x, int64_t n, int64_t stride) {
  static_assert(NB <= 8, "at most 8 chains");
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (int64_t j = 0; j < n; ++j) {
    const float* xj = x + j * stride;
    const __m256 wj = _mm256_broadcast_ss(w + j);
    a0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj), a0);
    if constexpr (NB > 1) a1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 8), a1);
    if constexpr (NB > 2) a2 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 16), a2);
    if constexpr (NB > 3) a3 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 24), a3);
    if constexpr (NB > 4) a4 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 32), a4);
    if constexpr (NB > 5) a5 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 40), a5);
    if constexpr (NB > 6) a6 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 48), a6);
    if constexpr (NB > 7) a7 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(xj + 56), a7);
  }
  const __m256 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(out + 8 * b, a[b]);
}

// out_h[hd] = sum_j w_h[j] x_j (w_h = w + h*ws, out_h = out + h*hd) for H
// heads, d in blocks of up to 64 lanes (hd a multiple of 8).
void weighted_sum(float* out, const float* w, int64_t ws, int H, const float* x, int64_t n, int64_t stride,
                  int64_t hd) {
  for (int h = 0; h < H; ++h)
    for (int64_t d = 0; d < hd; d += 64) {
      float* o = out + h * hd + d;
      const float* xd = x + d;
      switch (std::min<int64_t>(8, (hd - d) / 8)) {
        case 8: weighted_sum_block<8>(o, w + h * ws, xd, n, stride); break;
        case 7: weighted_sum_block<7>(o, w + h * ws, xd, n, stride); break;
        case 6: weighted_sum_block<6>(o, w + h * ws, xd, n, stride); break;
        case 5: weighted_sum_block<5>(o, w + h * ws, xd, n, stride); break;
        case 4: weighted_sum_block<4>(o, w + h * ws, xd, n, stride); break;
        case 3: weighted_sum_block<3>(o, w + h * ws, xd, n, stride); break;
        case 2: weighted_sum_block<2>(o, w + h * ws, xd, n, stride); break;
        default: weighted_sum_block<1>(o, w + h * ws, xd, n, stride); break;
      }
    }
}

// y_j[hd] = fma(w_h[j], a_h[hd], y_j) for j < n and the H heads in order
// (y_j at y + j*stride, w_h = w + h*ws, a_h = a + h*hd), in place: per
// element the same sequence of fmas as H passes of one head.
template <int H>
void axpy_rows(float* y, const float* w, int64_t ws, const float* a, int64_t n, int64_t stride, int64_t hd) {
  for (int64_t j = 0; j < n; ++j) {
    float* yj = y + j * stride;
    for (int64_t b = 0; b < hd; b += 8) {
      __m256 acc = _mm256_loadu_ps(yj + b);
      for (int h = 0; h < H; ++h)
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + h * ws + j), _mm256_loadu_ps(a + h * hd + b), acc);
      _mm256_storeu_ps(yj + b, acc);
    }
  }
}

// Token t of a run, heads [h0, h0 + H) of KV group g (p holds H rows of cap).
template <int H>
void forward_heads(float* out, const float* q, int64_t t, int64_t p0, const float* vg, int64_t kv_stride, int64_t heads,
                   int64_t hd, int64_t h0, float scale, int64_t cap, Scratch& s) {
  const int64_t r = (t * heads + h0) * hd, npos = p0 + t + 1;
  probs<H>(s.p.data(), cap, q + r, s.kt.data(), npos, hd, scale);
  weighted_sum(out + r, s.p.data(), cap, H, vg, npos, kv_stride, hd);
}

template <int H>
void backward_heads(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t t, int64_t p0,
                    const float* kg, int64_t kv_stride, int64_t dkv_stride, int64_t heads, int64_t hd, int64_t h0,
                    float scale, int64_t cap, Scratch& s) {
  const __m256 vscale = _mm256_set1_ps(scale);
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
    const __m256 vsum = _mm256_set1_ps(dsum[h]);
    for (int64_t i = h * cap; i < h * cap + chunks(npos) * kChunk; i += 8) {
      const __m256 d = _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_sub_ps(_mm256_loadu_ps(dp + i), vsum));
      _mm256_storeu_ps(ds + i, d);
      _mm256_storeu_ps(sds + i, _mm256_mul_ps(vscale, d));
    }
  }
  weighted_sum(dq + r, ds, cap, H, kg, npos, kv_stride, hd);  // dq_h = sum_j ds_j k_j
  for (int64_t b = 0; b < H * hd; b += 8)
    _mm256_storeu_ps(dq + r + b, _mm256_mul_ps(_mm256_loadu_ps(dq + r + b), vscale));
  axpy_rows<H>(dkg, sds, cap, q + r, npos, dkv_stride, hd);  // dk_j += (scale ds_j) q_h, heads in order
}

}  // namespace

// Token by token (dk and dv accumulate over tokens, then heads, in the
// reference's order), the group's heads in blocks of 4, 2 and 1.
void attention_group_avx2(float* out, const float* q, int64_t T, int64_t p0, const float* kg, const float* vg,
                          int64_t kv_stride, int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  if (hd % 8 != 0) return kOpsScalar.attention_group(out, q, T, p0, kg, vg, kv_stride, heads, kv_heads, hd, g, scale);
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

void attention_backward_group_avx2(float* dq, float* dkg, float* dvg, const float* dout, const float* q, int64_t T,
                                   int64_t p0, const float* kg, const float* vg, int64_t kv_stride, int64_t dkv_stride,
                                   int64_t heads, int64_t kv_heads, int64_t hd, int64_t g, float scale) {
  if (hd % 8 != 0)
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
MXRL_END_AVX2
#endif  // __x86_64__
