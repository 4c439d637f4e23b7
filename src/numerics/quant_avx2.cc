// AVX2 quantization kernels (Backend::Avx2, CPUs without AVX-512): MX
// quantization along rows and columns (RNE and stochastic rounding), MX
// dequantization and BF16 rounding, the ones a model's prepare and training
// step run; the FP8 group grids are the scalar reference. Each mirrors its
// scalar reference in quant_scalar.cc bit for bit (quant_backends_test.cc),
// with the same steps as quant_avx512.cc on 8 lanes.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "numerics/elem_consts.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "numerics/quant_kernels.h"
#include "numerics/rng.h"
#include "util/target_avx2.h"

MXRL_BEGIN_AVX2_F16C
namespace mxrl::detail {
namespace {

// ElemConsts broadcast to 8 lanes, once per kernel call.
struct Elem8 {
  __m256 max_normal, min_normal, sub_magic;
  __m256i sub_magic_bits, round_half, exp_adjust, nan_code, sign_in, one, abs_mask;
  __m128i shift, sign_shift;
  // decode8's constants.
  __m256 dec_mul;  // 2^(127 - bias)
  __m256i dec_signbit, dec_special_min;
  bool has_nan, has_inf;
  // sr_encode8's: the grid-step exponent is max(e, emin) - mbits.
  __m256i emin, mbits;
  explicit Elem8(ElemType t) {
    const ElemConsts c(t);
    max_normal = _mm256_set1_ps(c.max_normal);
    min_normal = _mm256_set1_ps(c.min_normal);
    sub_magic = _mm256_set1_ps(c.sub_magic);
    sub_magic_bits = _mm256_set1_epi32(static_cast<int>(c.sub_magic_bits));
    round_half = _mm256_set1_epi32(static_cast<int>(c.round_half));
    exp_adjust = _mm256_set1_epi32(static_cast<int>(c.exp_adjust));
    nan_code = _mm256_set1_epi32(static_cast<int>(c.nan_code));
    sign_in = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    one = _mm256_set1_epi32(1);
    abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
    shift = _mm_cvtsi32_si128(c.shift);
    sign_shift = _mm_cvtsi32_si128(c.sign_shift);
    dec_mul = _mm256_set1_ps(c.dec_mul);
    dec_signbit = _mm256_set1_epi32(static_cast<int>(c.dec_signbit));
    dec_special_min = _mm256_set1_epi32(static_cast<int>(c.dec_special_min));
    has_nan = c.has_nan;
    has_inf = c.has_inf;
    emin = _mm256_set1_epi32(c.emin);
    mbits = _mm256_set1_epi32(c.mbits);
  }
};

inline __m256 canonical_nan8(__m256 y) {
  return _mm256_blendv_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kCanonicalNan))),
                          _mm256_cmp_ps(y, y, _CMP_UNORD_Q));
}

// Decodes 8 codes (low byte of each lane) exactly to FP32 (elem_decode): NaN
// codes give the canonical NaN, E5M2's Inf codes ±Inf.
inline __m256 decode8(__m256i c, const Elem8& p) {
  const __m256i mag = _mm256_andnot_si256(p.dec_signbit, c);
  // mag << (23 - mbits) read as FP32 is the value times 2^(bias - 127),
  // subnormals included; one exact multiply puts it right.
  __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_sll_epi32(mag, p.shift)), p.dec_mul);
  if (p.has_nan) {
    const __m256i special = _mm256_cmpgt_epi32(mag, _mm256_sub_epi32(p.dec_special_min, p.one));
    v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kCanonicalNan))),
                         _mm256_castsi256_ps(special));
    if (p.has_inf)
      v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_inff()),
                           _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, p.dec_special_min)));
  }
  const __m256i sign = _mm256_sll_epi32(_mm256_and_si256(c, p.dec_signbit), p.sign_shift);
  return canonical_nan8(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign)));
}

// 2^(b - 127) for E8M0 bytes in the low byte of each lane (e8m0_to_f32).
inline __m256 e8m0_to_f32_8(__m256i b) {
  __m256i bits = _mm256_slli_epi32(b, 23);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000),  // 2^-127, an FP32 subnormal
                            _mm256_cmpeq_epi32(b, _mm256_setzero_si256()));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(bits, _mm256_set1_epi32(static_cast<int>(kCanonicalNan)),
                                                _mm256_cmpeq_epi32(b, _mm256_set1_epi32(kE8M0Nan))));
}

inline __m256i load_codes8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The low 64 bits of a * c in each 64-bit lane (AVX2 has no 64-bit multiply).
inline __m256i mul64(__m256i a, uint64_t c) {
  const __m256i clo = _mm256_set1_epi64x(static_cast<long long>(c & 0xFFFFFFFFu));
  const __m256i chi = _mm256_set1_epi64x(static_cast<long long>(c >> 32));
  const __m256i cross =
      _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), clo), _mm256_mul_epu32(a, chi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, clo), _mm256_slli_epi64(cross, 32));
}

inline __m256i splitmix64_mix4(__m256i z) {
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xBF58476D1CE4E5B9ull);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94D049BB133111EBull);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// sr_bits(key, idx0 + lane) for 8 consecutive indices.
inline __m256i sr_bits8(uint64_t key, uint64_t idx0) {
  const auto g = [](uint64_t l) { return static_cast<long long>(l * kGolden); };
  const __m256i base = _mm256_set1_epi64x(static_cast<long long>(key + idx0 * kGolden));
  const __m256i lo = splitmix64_mix4(_mm256_add_epi64(base, _mm256_setr_epi64x(g(0), g(1), g(2), g(3))));
  const __m256i hi = splitmix64_mix4(_mm256_add_epi64(base, _mm256_setr_epi64x(g(4), g(5), g(6), g(7))));
  // The high halves: lanes 0 1 4 5 | 2 3 6 7, then in order.
  const __m256 odd = _mm256_shuffle_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi), _MM_SHUFFLE(3, 1, 3, 1));
  return _mm256_permute4x64_epi64(_mm256_castps_si256(odd), _MM_SHUFFLE(3, 1, 2, 0));
}

// RNE, saturating encode of 8 lanes (elem_encode): codes in the low byte of
// each 32-bit lane.
inline __m256i encode8(__m256 v, const Elem8& p) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i sign = _mm256_srl_epi32(_mm256_and_si256(bits, p.sign_in), p.sign_shift);
  const __m256 a = _mm256_min_ps(_mm256_castsi256_ps(_mm256_and_si256(bits, p.abs_mask)), p.max_normal);  // NaN: max
  const __m256i ab = _mm256_castps_si256(a);
  // Normal: round the FP32 mantissa to mbits by integer add, then rebias.
  const __m256i lsb = _mm256_and_si256(_mm256_srl_epi32(ab, p.shift), p.one);
  const __m256i normal = _mm256_sub_epi32(
      _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(ab, p.round_half), lsb), p.shift), p.exp_adjust);
  // Subnormal (and zero): count steps of 2^(emin - mbits) via the magic add.
  const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(a, p.sub_magic)), p.sub_magic_bits);
  const __m256i is_sub = _mm256_castps_si256(_mm256_cmp_ps(a, p.min_normal, _CMP_LT_OQ));
  const __m256i code = _mm256_or_si256(_mm256_blendv_epi8(normal, sub, is_sub), sign);
  return _mm256_blendv_epi8(code, p.nan_code, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// Stochastic rounding of 8 finite lanes onto the element grid with the random
// bits u, then the exact encode (mx_elem in the scalar reference).
inline __m256i sr_encode8(__m256 v, const Elem8& p, __m256i u) {
  const __m256 a = _mm256_min_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), p.abs_mask)),
                                 p.max_normal);
  // eq: the exponent of the grid step at a (an FP32 subnormal or zero reads as -127).
  const __m256i ef = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 23), _mm256_set1_epi32(127));
  const __m256i eq = _mm256_sub_epi32(_mm256_max_epi32(ef, p.emin), p.mbits);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 m = _mm256_mul_ps(
      a, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(bias, eq), 23)));  // a * 2^-eq, exact
  const __m256 fl = _mm256_round_ps(m, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  // threshold = floor((m - fl) * 2^32) < 2^32, converted unsigned: above 2^31
  // take 2^31 off first (exact) and put it back as the top bit.
  const __m256 t = _mm256_mul_ps(_mm256_sub_ps(m, fl), _mm256_set1_ps(4294967296.0f));
  const __m256 two31 = _mm256_set1_ps(2147483648.0f);
  const __m256 big = _mm256_cmp_ps(t, two31, _CMP_GE_OQ);
  const __m256i threshold =
      _mm256_xor_si256(_mm256_cvttps_epi32(_mm256_sub_ps(t, _mm256_and_ps(big, two31))),
                       _mm256_and_si256(_mm256_castps_si256(big), p.sign_in));
  // u < threshold, unsigned: both with the top bit flipped, signed.
  const __m256i up = _mm256_cmpgt_epi32(_mm256_xor_si256(threshold, p.sign_in), _mm256_xor_si256(u, p.sign_in));
  const __m256 q = _mm256_add_ps(fl, _mm256_and_ps(_mm256_castsi256_ps(up), _mm256_set1_ps(1.0f)));
  const __m256 r = _mm256_min_ps(
      _mm256_mul_ps(q, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(eq, bias), 23))), p.max_normal);
  const __m256i sign = _mm256_and_si256(_mm256_castps_si256(v), p.sign_in);
  return encode8(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(r), sign)), p);
}

// f32_to_bf16 on 8 lanes, in the low halves of 32-bit lanes.
inline __m256i bf16_bits8(__m256i u) {
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(hi, _mm256_set1_epi32(1)))), 16);
  // |u| > Inf (a NaN), as a signed compare: both sides are below 2^31.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                         _mm256_set1_epi32(static_cast<int>(kInfBits)));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

// 8 consecutive inputs from element i, widened exactly to FP32.
inline __m256 load8(const void* x, InType in, int64_t i) {
  switch (in) {
    case InType::F32: return _mm256_loadu_ps(static_cast<const float*>(x) + i);
    case InType::BF16: {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    case InType::F16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(x) + i)));
    case InType::F32AsBF16: {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const float*>(x) + i));
      return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits8(u), 16));
    }
  }
  return _mm256_setzero_ps();
}

// 32 codes, 8 per lane group in order, as 32 bytes.
inline void store32(uint8_t* dst, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  // b's dwords: c0 0-3, c1 0-3, c2 0-3, c3 0-3 | c0 4-7, c1 4-7, c2 4-7, c3 4-7.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// 8 lanes scaled by mul (2^-e per lane, exact unless the product is an FP32
// subnormal, which lies far below the element grid), quantized.
template <bool kStochastic>
inline __m256i quant8(__m256 x, __m256 mul, const Elem8& p, uint64_t key, int64_t idx) {
  const __m256 v = _mm256_mul_ps(x, mul);
  if constexpr (kStochastic) return sr_encode8(v, p, sr_bits8(key, static_cast<uint64_t>(idx)));
  return encode8(v, p);
}

// 2^(127 - s) as FP32 for a finite scale byte s (s = 254: 2^-127, an FP32 subnormal).
inline float descale(uint8_t s) { return f32_from_bits(s == 254 ? 0x00400000u : uint32_t(254 - s) << 23); }

// The input type is a template argument so that the widening folds into the loop.
template <bool kStochastic, InType in>
void mx_quant_row_t(const void* x, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, uint8_t* codes,
                    uint8_t* scales) {
  const Elem8 p(cfg.elem);
  const uint64_t key = sr_key(cfg.seed);
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t i = r * cols + b * kMxBlock;
      __m256 v[4];
      __m256i m = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) {
        v[q] = load8(x, in, i + 8 * q);
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(v[q]), p.abs_mask));
      }
      __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
      h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4E));
      h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xB1));
      const auto amax = static_cast<uint32_t>(_mm_cvtsi128_si32(h));
      if (amax >= kInfBits) {  // NaN or Inf in the block
        scales[r * nb + b] = kE8M0Nan;
        std::memset(codes + i, 0, kMxBlock);
        continue;
      }
      const uint8_t s = mx_scale_byte(amax, cfg.elem, cfg.rule);
      scales[r * nb + b] = s;
      const __m256 mul = _mm256_set1_ps(descale(s));
      __m256i c[4];
      for (int q = 0; q < 4; ++q) c[q] = quant8<kStochastic>(v[q], mul, p, key, i + 8 * q);
      store32(codes + i, c[0], c[1], c[2], c[3]);
    }
}

void mx_quant_row(const void* x, InType in, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, uint8_t* codes,
                  uint8_t* scales) {
  with_in_type(in, [&](auto t) {
    constexpr InType kIn = decltype(t)::value;
    if (cfg.round == Rounding::Stochastic)
      mx_quant_row_t<true, kIn>(x, cols, r0, r1, cfg, codes, scales);
    else
      mx_quant_row_t<false, kIn>(x, cols, r0, r1, cfg, codes, scales);
  });
}

// The low bytes of 8 lanes, stored as 8 bytes.
inline void store8(uint8_t* dst, __m256i c) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(w, w));
}

// Columns in groups of 8; the last (fewer than 8) columns run the scalar reference.
template <bool kStochastic>
void mx_quant_col_t(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                    const MxConfig& cfg, uint8_t* codes, uint8_t* scales) {
  const Elem8 p(cfg.elem);
  const uint64_t key = sr_key(cfg.seed);
  const int64_t cv = c0 + (c1 - c0) / 8 * 8;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t c = c0; c < cv; c += 8) {
      const int64_t row0 = g * kMxBlock;
      __m256i m = _mm256_setzero_si256();
      for (int k = 0; k < kMxBlock; ++k)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(load8(x, in, (row0 + k) * cols + c)), p.abs_mask));
      alignas(32) uint32_t amax[8];
      alignas(32) float mul[8];
      alignas(32) uint32_t keep[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(amax), m);
      for (int l = 0; l < 8; ++l) {
        const bool bad = amax[l] >= kInfBits;  // NaN or Inf in the block: NaN scale, zero codes
        const uint8_t s = bad ? kE8M0Nan : mx_scale_byte(amax[l], cfg.elem, cfg.rule);
        scales[g * cols + c + l] = s;
        mul[l] = bad ? 0.0f : descale(s);
        keep[l] = bad ? 0 : 0xFFu;
      }
      const __m256 mulv = _mm256_load_ps(mul);
      const __m256i keepv = _mm256_load_si256(reinterpret_cast<const __m256i*>(keep));
      for (int k = 0; k < kMxBlock; ++k) {
        const int64_t i = (row0 + k) * cols + c;
        store8(codes + i, _mm256_and_si256(quant8<kStochastic>(load8(x, in, i), mulv, p, key, i), keepv));
      }
    }
  if (cv < c1) kScalarKernels.mx_quant_col(x, in, cols, g0, g1, cv, c1, cfg, codes, scales);
}

void mx_quant_col(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                  const MxConfig& cfg, uint8_t* codes, uint8_t* scales) {
  if (cfg.round == Rounding::Stochastic) return mx_quant_col_t<true>(x, in, cols, g0, g1, c0, c1, cfg, codes, scales);
  mx_quant_col_t<false>(x, in, cols, g0, g1, c0, c1, cfg, codes, scales);
}

void mx_dequant_row(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t r0, int64_t r1, ElemType elem,
                    float* out) {
  const Elem8 p(elem);
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      // One correctly rounded FP32 product, as mx_value's double product rounded once.
      const __m256 s = _mm256_set1_ps(e8m0_to_f32(scales[r * nb + b]));
      for (int h = 0; h < kMxBlock; h += 8) {
        const int64_t i = r * cols + b * kMxBlock + h;
        _mm256_storeu_ps(out + i, canonical_nan8(_mm256_mul_ps(decode8(load_codes8(codes + i), p), s)));
      }
    }
}

void mx_dequant_col(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t g0, int64_t g1, int64_t c0,
                    int64_t c1, ElemType elem, float* out) {
  const Elem8 p(elem);
  const int64_t cv = c0 + (c1 - c0) / 8 * 8;
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t c = c0; c < cv; c += 8) {
      const __m256 s = e8m0_to_f32_8(load_codes8(scales + g * cols + c));
      for (int k = 0; k < kMxBlock; ++k) {
        const int64_t i = (g * kMxBlock + k) * cols + c;
        _mm256_storeu_ps(out + i, canonical_nan8(_mm256_mul_ps(decode8(load_codes8(codes + i), p), s)));
      }
    }
  if (cv < c1) kScalarKernels.mx_dequant_col(codes, scales, cols, g0, g1, cv, c1, elem, out);
}

void bf16_encode(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_bits8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m256i b = bf16_bits8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)));
    // packus_epi32 interleaves the 128-bit halves: a 0-3, b 0-3 | a 4-7, b 4-7.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}
void bf16_round(const float* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_slli_epi32(bf16_bits8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))), 16));
  for (; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace
}  // namespace mxrl::detail
MXRL_END_AVX2

namespace mxrl::detail {
// Built outside the AVX2 region, so that naming it runs no AVX2 code
// (kScalarKernels is constant-initialized: safe to read here).
const QuantKernels kAvx2Kernels = [] {
  QuantKernels t = kScalarKernels;
  t.mx_quant_row = mx_quant_row;
  t.mx_quant_col = mx_quant_col;
  t.mx_dequant_row = mx_dequant_row;
  t.mx_dequant_col = mx_dequant_col;
  t.bf16_encode = bf16_encode;
  t.bf16_round = bf16_round;
  return t;
}();
}  // namespace mxrl::detail
#endif  // __x86_64__
