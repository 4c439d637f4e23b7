// 16-lane AVX-512 twins of kernels/ops/math.h, bit for bit the scalar functions
// lane by lane (ops_test checks them against the scalar ones on every input
// class: NaN, the overflow and underflow limits, subnormal results). Include
// only inside an MXRL_BEGIN_AVX512 region, after <immintrin.h>.
#pragma once
#include "kernels/ops/math.h"

namespace mxrl::detail {
namespace {

// 2^e for integer lanes e in [-126, 127].
inline __m512 pow2_16(__m512i e) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127)), 23));
}

// exp_f (kernels/ops/math.h) on 16 lanes: the same n, the same two-part reduction,
// the same Horner fmas, and pow2_scale's split of the power of two written as
// (p * 2^a) * 2^b with b = 0 in the common case (a multiply by 1 is exact).
inline __m512 exp16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283935546875f), _CMP_GT_OQ);
  const __mmask16 small = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.972084045410f), _CMP_LT_OQ);
  const __mmask16 normal = static_cast<__mmask16>(~(nan | big | small));
  const __m512 xs = _mm512_maskz_mov_ps(normal, x);  // keep the integer conversion in range
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xs, _mm512_set1_ps(1.44269502162933349609f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xs);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n);
  // pow2_scale: n > 127 -> (p * 2^127) * 2^(n-127); n < -126 -> (p * 2^(n+64)) * 2^-64.
  const __mmask16 hi = _mm512_cmpgt_epi32_mask(ni, _mm512_set1_epi32(127));
  const __mmask16 lo = _mm512_cmplt_epi32_mask(ni, _mm512_set1_epi32(-126));
  __m512i a = _mm512_mask_mov_epi32(ni, hi, _mm512_set1_epi32(127));
  a = _mm512_mask_add_epi32(a, lo, ni, _mm512_set1_epi32(64));
  __m512i b = _mm512_maskz_sub_epi32(hi, ni, _mm512_set1_epi32(127));
  b = _mm512_mask_mov_epi32(b, lo, _mm512_set1_epi32(-64));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, pow2_16(a)), pow2_16(b));
  y = _mm512_mask_mov_ps(y, big, _mm512_set1_ps(__builtin_inff()));
  y = _mm512_mask_mov_ps(y, small, _mm512_setzero_ps());
  return _mm512_mask_mov_ps(y, nan, x);
}

// sigmoid_f on 16 lanes (-x as a sign flip, as the scalar negation, NaN included).
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));
}

// lane_tree on the 16 lanes of v (l + l+8, then l + l+4, l + l+2, l + l+1).
inline float lane_tree16(__m512 v) {
  alignas(64) float acc[16];
  _mm512_store_ps(acc, v);
  return lane_tree(acc);
}

}  // namespace
}  // namespace mxrl::detail
