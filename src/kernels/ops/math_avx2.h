// AVX2 building blocks of the ops' vector kernels: exp_f and sigmoid_f
// (kernels/ops/math.h) on 8 lanes, bit for bit. Include only inside an AVX2
// target region (util/target_avx2.h).
#pragma once
#include <immintrin.h>

#include "kernels/ops/math.h"

namespace mxrl::detail {
namespace {

// 2^n as FP32 for n in [-126, 127] (pow2_f).
inline __m256 pow2_8(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

// exp_f on 8 lanes (kernels/ops/math.h): the same steps, the range limits and
// pow2_scale's split by blends.
inline __m256 exp8(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ);
  const __m256 small = _mm256_cmp_ps(x, _mm256_set1_ps(-103.972084045410f), _CMP_LT_OQ);
  const __m256 xs = _mm256_andnot_ps(_mm256_or_ps(nan, _mm256_or_ps(big, small)), x);  // in range for the conversion
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xs, _mm256_set1_ps(1.44269502162933349609f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xs);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  // pow2_scale: n > 127 -> (p * 2^127) * 2^(n-127); n < -126 -> (p * 2^(n+64)) * 2^-64; else p * 2^n * 2^0.
  const __m256i hi = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
  const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), ni);
  __m256i a = _mm256_blendv_epi8(ni, _mm256_set1_epi32(127), hi);
  a = _mm256_blendv_epi8(a, _mm256_add_epi32(ni, _mm256_set1_epi32(64)), lo);
  __m256i b = _mm256_and_si256(hi, _mm256_sub_epi32(ni, _mm256_set1_epi32(127)));
  b = _mm256_blendv_epi8(b, _mm256_set1_epi32(-64), lo);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, pow2_8(a)), pow2_8(b));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), big);
  y = _mm256_andnot_ps(small, y);
  return _mm256_blendv_ps(y, x, nan);
}

// sigmoid_f on 8 lanes (-x as a sign flip, as the scalar negation, NaN included).
inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)))));
}

}  // namespace
}  // namespace mxrl::detail
