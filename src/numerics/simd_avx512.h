// AVX-512 building blocks for the quantization kernels: loading the input
// types, encoding 16 FP32 lanes onto an element grid and decoding them back,
// for every element type with the same code (the format is data, not a
// template). Include only from files compiled with the AVX-512 flags.
#pragma once
#include <immintrin.h>

#include <cmath>

#include "numerics/elem_consts.h"
#include "numerics/formats.h"
#include "numerics/mx.h"

namespace mxrl {

// u + 0x7FFF + (bit 16 of u): f32_to_bf16's round to nearest even, the
// BF16 bits in the top half (for finite u; a NaN needs bf16_bits16).
inline __m512i bf16_rne_sum16(__m512i u) {
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
}

// f32_to_bf16 on 16 lanes: RNE on the bits, a NaN quieted (payload's top
// bits kept), as a 32-bit lane holding the 16 BF16 bits.
inline __m512i bf16_bits16(__m512i u) {
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                _mm512_set1_epi32(0x7F800000));  // |u| > +Inf
  return _mm512_mask_blend_epi32(nan, _mm512_srli_epi32(bf16_rne_sum16(u), 16),
                                 _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
}

// The same rounding for finite lanes, back in FP32.
inline __m512 bf16_round_finite16(__m512 v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(bf16_rne_sum16(_mm512_castps_si512(v)), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// 16 consecutive inputs starting at element i, widened exactly to FP32.
// Masked lanes read nothing and are zero.
inline __m512 load16(const void* x, InType in, int64_t i, __mmask16 m = 0xFFFF) {
  switch (in) {
    case InType::F32: return _mm512_maskz_loadu_ps(m, static_cast<const float*>(x) + i);
    case InType::BF16: {
      const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(x) + i);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    case InType::F16: {
      const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(x) + i);
      return _mm512_cvtph_ps(h);
    }
    case InType::F32AsBF16: {
      const __m512i u = _mm512_maskz_loadu_epi32(m, static_cast<const float*>(x) + i);
      return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits16(u), 16));
    }
  }
  return _mm512_setzero_ps();
}

inline __m512i abs_bits16(__m512 v) { return _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)); }

// Element-format constants, broadcast once per kernel call.
struct SimdElem {
  __m512 max_normal, min_normal, sub_magic;
  __m512i sub_magic_bits, round_half, exp_adjust, nan_code, sign_in, one;
  __m128i shift;   // 23 - mbits
  __m512i low_bits;  // 2^(23 - mbits) - 1: the FP32 mantissa bits below the element's
  int sign_shift;  // 32 - bits: FP32 sign bit -> code sign bit
  int emin, mbits;
  ElemType type;
  // decode16's constants (per kernel call, not per vector).
  __m512 dec_mul;  // 2^(127 - bias)
  __m512i dec_signbit, dec_special_min;
  __m128i dec_sign_shift;  // 32 - bits
  bool has_nan, has_inf;
  // The scale rule's constants (mx_scale_byte).
  float inv_max_normal;  // 1 / max_normal, rounded as mx_scale_byte rounds it
  int emax;

  explicit SimdElem(ElemType t) : SimdElem(t, ElemConsts(t)) {}
  SimdElem(ElemType t, const ElemConsts& c) : type(t) {
    emin = c.emin;
    mbits = c.mbits;
    max_normal = _mm512_set1_ps(c.max_normal);
    min_normal = _mm512_set1_ps(c.min_normal);
    sub_magic = _mm512_set1_ps(c.sub_magic);
    sub_magic_bits = _mm512_set1_epi32(static_cast<int>(c.sub_magic_bits));
    round_half = _mm512_set1_epi32(static_cast<int>(c.round_half));
    exp_adjust = _mm512_set1_epi32(static_cast<int>(c.exp_adjust));
    nan_code = _mm512_set1_epi32(static_cast<int>(c.nan_code));
    sign_in = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    one = _mm512_set1_epi32(1);
    shift = _mm_cvtsi32_si128(c.shift);
    low_bits = _mm512_set1_epi32(static_cast<int>((1u << c.shift) - 1));
    sign_shift = c.sign_shift;
    dec_mul = _mm512_set1_ps(c.dec_mul);
    dec_signbit = _mm512_set1_epi32(static_cast<int>(c.dec_signbit));
    dec_special_min = _mm512_set1_epi32(static_cast<int>(c.dec_special_min));
    dec_sign_shift = _mm_cvtsi32_si128(c.sign_shift);
    has_nan = c.has_nan;
    has_inf = c.has_inf;
    inv_max_normal = c.inv_max_normal;
    emax = c.emax;
  }
};

// RNE, saturating encode of 16 lanes (matches elem_encode). Codes in the low
// byte of each 32-bit lane. kNan false: the caller knows no lane is NaN.
template <bool kNan = true>
inline __m512i encode16(__m512 v, const SimdElem& p) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i sign = _mm512_srl_epi32(_mm512_and_si512(bits, p.sign_in), _mm_cvtsi32_si128(p.sign_shift));
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(v), p.max_normal);
  const __m512i ab = _mm512_castps_si512(a);
  // Normal: round the FP32 mantissa to mbits by integer add, then rebias.
  const __m512i lsb = _mm512_and_si512(_mm512_srl_epi32(ab, p.shift), p.one);
  const __m512i normal = _mm512_sub_epi32(
      _mm512_srl_epi32(_mm512_add_epi32(_mm512_add_epi32(ab, p.round_half), lsb), p.shift), p.exp_adjust);
  // Subnormal (and zero): count steps of 2^(emin - mbits) via the magic add.
  const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(a, p.sub_magic)), p.sub_magic_bits);
  const __mmask16 is_sub = _mm512_cmp_ps_mask(a, p.min_normal, _CMP_LT_OQ);
  __m512i code = _mm512_or_si512(_mm512_mask_blend_epi32(is_sub, normal, sub), sign);
  if constexpr (!kNan) return code;
  const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(code, is_nan, p.nan_code);
}

// Decode 16 codes (low byte of each lane) exactly to FP32; NaN codes give the
// canonical NaN, E5M2 Inf codes give ±Inf.
inline __m512 decode16(__m512i c, const SimdElem& p) {
  const __m512i mag = _mm512_andnot_si512(p.dec_signbit, c);
  // mag << (23 - mbits) read as FP32 is the value scaled by 2^(bias - 127),
  // subnormals included; one exact multiply puts it right.
  __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_sll_epi32(mag, p.shift)), p.dec_mul);
  if (p.has_nan) {
    const __mmask16 special = _mm512_cmpge_epi32_mask(mag, p.dec_special_min);
    const __mmask16 inf = p.has_inf ? _mm512_cmpeq_epi32_mask(mag, p.dec_special_min) : 0;
    v = _mm512_mask_mov_ps(v, special, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
    v = _mm512_mask_mov_ps(v, inf, _mm512_set1_ps(__builtin_inff()));
  }
  const __m512i sign = _mm512_sll_epi32(_mm512_and_si512(c, p.dec_signbit), p.dec_sign_shift);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign)), nan,
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

// 2^(b - 127) for E8M0 bytes in the low byte of each lane (0xFF: NaN).
inline __m512 e8m0_to_f32_16(__m512i b) {
  __m512i bits = _mm512_slli_epi32(b, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                               _mm512_set1_epi32(0x00400000));  // 2^-127, an FP32 subnormal
  bits =
      _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_castsi512_ps(bits);
}

}  // namespace mxrl
