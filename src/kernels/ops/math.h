// Elementary functions and reductions with one fixed, documented evaluation
// order, so that a vectorized twin can reproduce them bit for bit and so
// that results never depend on how a batch was cut. Everything downstream
// that needs exp or a sum (softmax, SiLU, RMSNorm, log-softmax) uses these.
//
// The functions are `static inline`: kernels/ops/ops_impl.h is compiled once per
// target (baseline and AVX-512), and each copy must keep its own.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mxrl {

// 2^n as an FP32 (n in [-126, 127]).
static inline float pow2_f(int n) {
  const uint32_t bits = static_cast<uint32_t>(n + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// p * 2^n with one rounding (as std::ldexp), for n in [-150, 128] and p in
// [0.5, 2): split so every intermediate factor is a normal power of two.
static inline float pow2_scale(float p, int n) {
  if (n > 127) return (p * pow2_f(127)) * pow2_f(n - 127);
  if (n < -126) return (p * pow2_f(n + 64)) * pow2_f(-64);
  return p * pow2_f(n);
}

// exp(x) in FP32 (Cephes-style: n = rne(x*log2e), two-part ln2 reduction,
// degree-6 polynomial by Horner with fma, then an exact power-of-two scale).
// Max error about 1 ulp; +inf above 88.72, 0 below -103.97, NaN stays NaN.
static inline float exp_f(float x) {
  if (__builtin_isnan(x)) return x;
  if (x > 88.72283935546875f) return INFINITY;
  if (x < -103.972084045410f) return 0.0f;
  const float n = __builtin_nearbyintf(x * 1.44269502162933349609f);
  float r = __builtin_fmaf(n, -0.693359375f, x);
  r = __builtin_fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p, r * r, r);
  p = p + 1.0f;
  return pow2_scale(p, static_cast<int>(n));
}

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }
static inline float silu_f(float x) { return x * sigmoid_f(x); }

// The canonical FP32 reduction: 16 partial sums (element i goes to lane
// i % 16, each lane accumulated in order), then lanes combined pairwise
// (l + l+8, then l + l+4, l + l+2, l + l+1). A 16-wide SIMD loop computes
// exactly this.
static inline float lane_tree(float* acc) {
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l] + acc[l + w];
  return acc[0];
}

static inline float sum_canonical(const float* x, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = acc[i % 16] + x[i];
  return lane_tree(acc);
}

// sum of x[i]^2, each lane as fma(x, x, acc).
static inline float sumsq_canonical(const float* x, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; ++i) acc[i % 16] = __builtin_fmaf(x[i], x[i], acc[i % 16]);
  return lane_tree(acc);
}

// Sequential dot product: acc = fma(a[i], b[i], acc) for i in order (the GEMM order).
static inline float dot_seq(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = __builtin_fmaf(a[i], b[i], acc);
  return acc;
}

}  // namespace mxrl
