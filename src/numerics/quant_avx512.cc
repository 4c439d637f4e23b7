// AVX-512 quantization kernels. Each mirrors its scalar reference in
// quant_scalar.cc and must agree with it bit for bit (quant_test.cc).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "numerics/formats.h"
#include "numerics/mx.h"
#include "numerics/quant_kernels.h"
#include "numerics/rng.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "numerics/simd_avx512.h"

namespace mxrl::detail {
namespace {
using namespace mxrl;

// sr_bits(key, idx0 + lane) for 16 consecutive indices.
inline __m512i sr_bits16(uint64_t key, uint64_t idx0) {
  const __m512i lanes_lo = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i golden = _mm512_set1_epi64(static_cast<long long>(kGolden));
  auto mix = [&](__m512i lanes) {
    const __m512i base = _mm512_set1_epi64(static_cast<long long>(key + idx0 * kGolden));
    __m512i z = _mm512_add_epi64(base, _mm512_mullo_epi64(lanes, golden));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                           _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull)));
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    return _mm512_cvtepi64_epi32(_mm512_srli_epi64(z, 32));
  };
  const __m256i lo = mix(lanes_lo);
  const __m256i hi = mix(_mm512_add_epi64(lanes_lo, _mm512_set1_epi64(8)));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Stochastic rounding of 16 lanes onto the grid, then exact encode (matches
// mx_elem in the scalar reference).
inline __m512i sr_encode16(__m512 v, const SimdElem& p, __m512i u) {
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(v), p.max_normal);
  const __m512i ef = _mm512_srli_epi32(_mm512_castps_si512(a), 23);
  const __m512i eq =
      _mm512_sub_epi32(_mm512_max_epi32(_mm512_sub_epi32(ef, _mm512_set1_epi32(127)), _mm512_set1_epi32(p.emin)),
                       _mm512_set1_epi32(p.mbits));
  const __m512 eqf = _mm512_cvtepi32_ps(eq);
  const __m512 m = _mm512_scalef_ps(a, _mm512_sub_ps(_mm512_setzero_ps(), eqf));  // exact
  const __m512 fl = _mm512_roundscale_ps(m, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512i threshold = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_sub_ps(m, fl), _mm512_set1_ps(4294967296.0f)));
  const __mmask16 up = _mm512_cmplt_epu32_mask(u, threshold);
  const __m512 q = _mm512_mask_add_ps(fl, up, fl, _mm512_set1_ps(1.0f));
  const __m512 r = _mm512_min_ps(_mm512_scalef_ps(q, eqf), p.max_normal);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(v), p.sign_in);
  return encode16(_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign)), p);
}

// kNan false: x holds no NaN (a finite block's elements).
template <bool kStochastic, bool kNan = true>
inline __m512i quant16(__m512 x, __m512 neg_e, const SimdElem& p, uint64_t key, uint64_t idx) {
  const __m512 v = _mm512_scalef_ps(x, neg_e);  // x * 2^-e, exact unless it underflows to 0-bound values
  if constexpr (kStochastic) return sr_encode16(v, p, sr_bits16(key, idx));
  return encode16<kNan>(v, p);
}

// Scale bytes for 16 finite block maxima (mx_scale_byte, vectorized).
inline __m512i scale_bytes16(__m512i amax, ElemType elem, ScaleRule rule) {
  const ElemTraits& f = elem_traits(elem);
  if (rule == ScaleRule::Floor) {
    __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(amax, 23), _mm512_set1_epi32(127 + f.emax));
    e = _mm512_max_epi32(_mm512_min_epi32(e, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    return _mm512_add_epi32(e, _mm512_set1_epi32(127));
  }
  const __m512i d = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(amax), _mm512_set1_ps(1.0f / f.max_normal)));
  const __m512i exp = _mm512_srli_epi32(d, 23);
  const __m512i mant = _mm512_and_si512(d, _mm512_set1_epi32(0x7FFFFF));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal = _mm512_mask_add_epi32(exp, _mm512_test_epi32_mask(mant, mant), exp, one);
  const __m512i sub = _mm512_maskz_mov_epi32(_mm512_cmpgt_epi32_mask(mant, _mm512_set1_epi32(0x400000)), one);
  return _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(exp, _mm512_setzero_si512()), normal, sub);
}

inline void store16(uint8_t* dst, __m512i codes, __mmask16 m = 0xFFFF) {
  _mm512_mask_cvtepi32_storeu_epi8(dst, m, codes);
}

inline __m512 canonical_nan(__m512 y) {
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
}

// mx_scale_byte (mx.cc) for one finite block maximum, from the kernel's
// broadcast constants (no table lookup per block).
inline uint8_t scale_byte(uint32_t amax_bits, ScaleRule rule, const SimdElem& p) {
  if (rule == ScaleRule::Floor) {
    const int e = std::clamp(static_cast<int>(amax_bits >> 23) - 127 - p.emax, -127, 127);
    return static_cast<uint8_t>(e + 127);
  }
  const uint32_t d = f32_bits(f32_from_bits(amax_bits) * p.inv_max_normal);
  const uint32_t exp = d >> 23, mant = d & 0x7FFFFFu;
  if (exp == 0) return mant > 0x400000u ? 1 : 0;
  return static_cast<uint8_t>(exp + (mant != 0 ? 1 : 0));
}

// Lane j of the result: the largest lane of m[j] (m is clobbered). Four
// rounds, each pairing neighbours' even and odd lanes, halve the lanes per
// block: 16 maxima for about a third of the work of 16 horizontal reductions.
inline __m512i max_across16(__m512i m[16]) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int n = 16; n > 1; n /= 2)
    for (int i = 0; i < n / 2; ++i)
      m[i] = _mm512_max_epu32(_mm512_permutex2var_epi32(m[2 * i], even, m[2 * i + 1]),
                              _mm512_permutex2var_epi32(m[2 * i], odd, m[2 * i + 1]));
  return m[0];
}

// Lane j: the largest |x| bits of block j of the 16 blocks from element i0.
template <InType in>
inline __m512i block_maxima16(const void* x, int64_t i0) {
  __m512i m[16];
  for (int j = 0; j < 16; ++j)
    m[j] = _mm512_max_epu32(abs_bits16(load16(x, in, i0 + j * kMxBlock)),
                            abs_bits16(load16(x, in, i0 + j * kMxBlock + 16)));
  return max_across16(m);
}

// ---------------------------------------------------------------------------
// E4M3 codes of a block of BF16 values, RNE, in 16-bit lanes (32 elements a
// vector, half the work of the FP32 path). With BF16 bits b = sign | E << 7 |
// m (7 mantissa bits) and scale byte s, the element x * 2^(127 - s) is
// 1.m * 2^(E - s), so on the E4M3 normal range (E - s >= -6) its code is
// ((E - s + 7) << 3 | m) with m rounded to 3 bits: (b & 0x7FFF) - ((s - 7) << 7)
// shifted right by 4 with round-to-nearest-even (a carry moves into the
// exponent, as it should). Results above 448 clamp to 0x7E, as encode16 clamps
// before rounding (448 is the top of the grid, so either way gives 0x7E).
// Below the normal range the subtraction saturates at 0, which is right for
// E - s <= -11 (under 2^-10, half the smallest subnormal: code 0) and for
// zeros and BF16 subnormals (E = 0, and s >= kE4m3MinS puts them under
// 2^-15). The band E - s in [-10, -7], E4M3 subnormals and what rounds to
// them, is left to the FP32 path: a block with an element there is encoded
// by encode16 (e4m3_band says whether it has one). The sign is bit 15 moved
// to bit 7.
constexpr int kE4m3MinS = 16;

// The 32 BF16 bit patterns of block i (elements i .. i + 31, in order) of a
// BF16 input or of FP32 rounded to BF16 (finite values: a good block).
template <InType in>
inline __m512i bf16_block32(const void* x, int64_t i) {
  if constexpr (in == InType::BF16) return _mm512_loadu_si512(static_cast<const uint16_t*>(x) + i);
  const float* f = static_cast<const float*>(x) + i;
  const __m512i r0 = bf16_rne_sum16(_mm512_loadu_si512(f)), r1 = bf16_rne_sum16(_mm512_loadu_si512(f + 16));
  const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                                       25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(r0, odd, r1);  // the top halves: the BF16 bits
}

// True if an element of the block lies in the band the 16-bit path leaves to
// encode16 (E - s in [-10, -7]).
inline bool e4m3_band(__m512i mag, int s) {
  const __m512i u = _mm512_sub_epi16(mag, _mm512_set1_epi16(static_cast<short>((s - 10) << 7)));
  return _mm512_cmplt_epu16_mask(u, _mm512_set1_epi16(4 << 7)) != 0;
}

// The block's 32 codes, one byte each, for s >= kE4m3MinS and no element in
// the band.
inline __m256i e4m3_codes32(__m512i b, __m512i mag, int s) {
  const __m512i t = _mm512_subs_epu16(mag, _mm512_set1_epi16(static_cast<short>((s - 7) << 7)));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(t, 4), _mm512_set1_epi16(1));
  const __m512i r = _mm512_srli_epi16(_mm512_add_epi16(_mm512_add_epi16(t, _mm512_set1_epi16(7)), lsb), 4);
  const __m512i code = _mm512_min_epu16(r, _mm512_set1_epi16(0x7E));
  const __m512i sign = _mm512_srli_epi16(b, 8);
  return _mm512_cvtepi16_epi8(_mm512_ternarylogic_epi32(code, sign, _mm512_set1_epi16(0x80), 0xF8));  // a | (b & c)
}

// Row blocks 16 at a time (their maxima side by side, their scale bytes in
// one vector), the row's last nb % 16 blocks one by one; the same bits
// either way (quant_backends_test runs rows of 16 + 5 blocks). The input
// type is a template argument so that the widening folds into the loops.
// F32AsBF16 in the 16-block path: the maxima are taken over the FP32 inputs
// and rounded to BF16 once (the rounding is monotonic in magnitude, so that is
// the maximum of the rounded values; a NaN stays NaN and a value that rounds
// to Inf gives Inf, a bad block either way), and the elements of a good
// block, all finite, are rounded without the NaN case as they are encoded.
template <bool kStochastic, InType in>
void mx_quant_row_t(const void* x, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, uint8_t* codes,
                    uint8_t* scales) {
  constexpr bool kRound = in == InType::F32AsBF16;
  constexpr InType raw = kRound ? InType::F32 : in;
  // BF16 values, RNE: E4M3 blocks may take the 16-bit path (e4m3_codes32).
  constexpr bool kBits16 = !kStochastic && (kRound || in == InType::BF16);
  const bool e4m3 = cfg.elem == ElemType::E4M3;
  const auto element = [&](int64_t i) {
    const __m512 v = load16(x, raw, i);
    if constexpr (kRound) return bf16_round_finite16(v);
    return v;
  };
  const SimdElem p(cfg.elem);
  const uint64_t key = sr_key(cfg.seed);
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) {
      const int64_t i0 = r * cols + b * kMxBlock;
      __m512i amax = block_maxima16<raw>(x, i0);
      if constexpr (kRound) amax = _mm512_slli_epi32(bf16_bits16(amax), 16);
      const __mmask16 bad = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(static_cast<int>(kInfBits)));
      const __m512i sb =
          _mm512_mask_mov_epi32(scale_bytes16(amax, cfg.elem, cfg.rule), bad, _mm512_set1_epi32(kE8M0Nan));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scales + r * nb + b), _mm512_cvtepi32_epi8(sb));
      const __m512 neg_e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(127), sb));
      alignas(64) int32_t sv[16];
      if constexpr (kBits16) _mm512_store_si512(sv, sb);
      for (int j = 0; j < 16; ++j) {
        const int64_t i = i0 + j * kMxBlock;
        if (bad >> j & 1) {
          std::memset(codes + i, 0, kMxBlock);
          continue;
        }
        if constexpr (kBits16)
          if (e4m3 && sv[j] >= kE4m3MinS) {
            const __m512i bits = bf16_block32<in>(x, i);
            const __m512i mag = _mm512_and_si512(bits, _mm512_set1_epi16(0x7FFF));
            if (!e4m3_band(mag, sv[j])) {
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), e4m3_codes32(bits, mag, sv[j]));
              continue;
            }
          }
        const __m512 ne = _mm512_permutexvar_ps(_mm512_set1_epi32(j), neg_e);
        store16(codes + i, quant16<kStochastic, false>(element(i), ne, p, key, i));
        store16(codes + i + 16, quant16<kStochastic, false>(element(i + 16), ne, p, key, i + 16));
      }
    }
    for (; b < nb; ++b) {
      const int64_t i = r * cols + b * kMxBlock;
      const __m512 x0 = load16(x, in, i), x1 = load16(x, in, i + 16);
      const uint32_t amax = _mm512_reduce_max_epu32(_mm512_max_epu32(abs_bits16(x0), abs_bits16(x1)));
      if (amax >= kInfBits) {
        scales[r * nb + b] = kE8M0Nan;
        std::memset(codes + i, 0, kMxBlock);
        continue;
      }
      const uint8_t s = scale_byte(amax, cfg.rule, p);
      scales[r * nb + b] = s;
      const __m512 neg_e = _mm512_set1_ps(static_cast<float>(127 - s));
      store16(codes + i, quant16<kStochastic>(x0, neg_e, p, key, i));
      store16(codes + i + 16, quant16<kStochastic>(x1, neg_e, p, key, i + 16));
    }
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

template <bool kStochastic>
void mx_quant_col_t(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                    const MxConfig& cfg, uint8_t* codes, uint8_t* scales) {
  const SimdElem p(cfg.elem);
  const uint64_t key = sr_key(cfg.seed);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t c = c0; c < c1; c += 16) {
      const __mmask16 m = c1 - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (c1 - c)) - 1);
      const int64_t row0 = g * kMxBlock;
      __m512i amax = _mm512_setzero_si512();
      for (int k = 0; k < kMxBlock; ++k)
        amax = _mm512_max_epu32(amax, abs_bits16(load16(x, in, (row0 + k) * cols + c, m)));
      const __mmask16 bad = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(kInfBits));
      const __m512i sb =
          _mm512_mask_mov_epi32(scale_bytes16(amax, cfg.elem, cfg.rule), bad, _mm512_set1_epi32(kE8M0Nan));
      store16(scales + g * cols + c, sb, m);
      const __m512 neg_e = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(127), sb));
      for (int k = 0; k < kMxBlock; ++k) {
        const int64_t i = (row0 + k) * cols + c;
        const __m512i code = quant16<kStochastic>(load16(x, in, i, m), neg_e, p, key, i);
        store16(codes + i, _mm512_maskz_mov_epi32(static_cast<__mmask16>(~bad), code), m);
      }
    }
}

void mx_quant_col(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                  const MxConfig& cfg, uint8_t* codes, uint8_t* scales) {
  if (cfg.round == Rounding::Stochastic)
    mx_quant_col_t<true>(x, in, cols, g0, g1, c0, c1, cfg, codes, scales);
  else
    mx_quant_col_t<false>(x, in, cols, g0, g1, c0, c1, cfg, codes, scales);
}

inline __m512i load_codes16(const uint8_t* p, __mmask16 m = 0xFFFF) {
  return _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
}

void mx_dequant_row(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t r0, int64_t r1, ElemType elem,
                    float* out) {
  const SimdElem p(elem);
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 s = _mm512_set1_ps(e8m0_to_f32(scales[r * nb + b]));
      for (int h = 0; h < kMxBlock; h += 16) {
        const int64_t i = r * cols + b * kMxBlock + h;
        _mm512_storeu_ps(out + i, canonical_nan(_mm512_mul_ps(decode16(load_codes16(codes + i), p), s)));
      }
    }
}

void mx_dequant_col(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t g0, int64_t g1, int64_t c0,
                    int64_t c1, ElemType elem, float* out) {
  const SimdElem p(elem);
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t c = c0; c < c1; c += 16) {
      const __mmask16 m = c1 - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (c1 - c)) - 1);
      const __m512 s = e8m0_to_f32_16(load_codes16(scales + g * cols + c, m));
      for (int k = 0; k < kMxBlock; ++k) {
        const int64_t i = (g * kMxBlock + k) * cols + c;
        _mm512_mask_storeu_ps(out + i, m, canonical_nan(_mm512_mul_ps(decode16(load_codes16(codes + i, m), p), s)));
      }
    }
}

// The value encode16 gives a finite lane, decoded, in FP32: |v| saturated at
// max_normal and rounded to mbits as encode16 rounds it (the integer add, then
// the low bits cleared instead of shifted out and rebiased; the magic add and
// its subtraction below min_normal), the sign kept. decode16(encode16(v)) for
// finite v, in half the operations.
inline __m512 grid16(__m512 v, const SimdElem& p) {
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(v), p.max_normal);
  const __m512i ab = _mm512_castps_si512(a);
  const __m512i lsb = _mm512_and_si512(_mm512_srl_epi32(ab, p.shift), p.one);
  const __m512i normal = _mm512_andnot_si512(p.low_bits, _mm512_add_epi32(_mm512_add_epi32(ab, p.round_half), lsb));
  const __m512 sub = _mm512_sub_ps(_mm512_add_ps(a, p.sub_magic), p.sub_magic);
  const __mmask16 is_sub = _mm512_cmp_ps_mask(a, p.min_normal, _CMP_LT_OQ);
  const __m512i r = _mm512_mask_blend_epi32(is_sub, normal, _mm512_castps_si512(sub));
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(r, _mm512_castps_si512(v), p.sign_in, 0xF8));  // r | (v & sign)
}

// mx_dequant_row(mx_quant_row(x)) for FP32 rows, RNE, without the codes: a
// good block's elements are scaled by 2^-e, put on the grid (grid16) and
// scaled back by 2^e (VSCALEFPS rounds once, as the dequantizer's multiply by
// the scale does, FP32 subnormal results included, under the MXCSR the
// quantizers run with: no DAZ, which would make that multiply read the scale
// 2^-127 as zero); a bad block's are the canonical NaN.
void mx_round_trip_row(const float* x, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, float* out) {
  const SimdElem p(cfg.elem);
  const int64_t nb = cols / kMxBlock;
  const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kCanonicalNan)));
  auto block = [&](int64_t i, bool bad, __m512 neg_e, __m512 e) {
    for (int h = 0; h < kMxBlock; h += 16) {
      const __m512 v = _mm512_scalef_ps(_mm512_loadu_ps(x + i + h), neg_e);
      _mm512_storeu_ps(out + i + h, bad ? nan : _mm512_scalef_ps(grid16(v, p), e));
    }
  };
  for (int64_t r = r0; r < r1; ++r) {
    int64_t b = 0;
    for (; b + 16 <= nb; b += 16) {
      const int64_t i0 = r * cols + b * kMxBlock;
      const __m512i amax = block_maxima16<InType::F32>(x, i0);
      const __mmask16 bad = _mm512_cmpge_epu32_mask(amax, _mm512_set1_epi32(static_cast<int>(kInfBits)));
      const __m512 e = _mm512_cvtepi32_ps(
          _mm512_sub_epi32(scale_bytes16(amax, cfg.elem, cfg.rule), _mm512_set1_epi32(127)));  // bad lanes unused
      for (int j = 0; j < 16; ++j) {
        const __m512 ej = _mm512_permutexvar_ps(_mm512_set1_epi32(j), e);
        block(i0 + j * kMxBlock, bad >> j & 1, _mm512_sub_ps(_mm512_setzero_ps(), ej), ej);
      }
    }
    for (; b < nb; ++b) {
      const int64_t i = r * cols + b * kMxBlock;
      const uint32_t amax = _mm512_reduce_max_epu32(
          _mm512_max_epu32(abs_bits16(_mm512_loadu_ps(x + i)), abs_bits16(_mm512_loadu_ps(x + i + 16))));
      const bool bad = amax >= kInfBits;
      const float e = bad ? 0.0f : static_cast<float>(scale_byte(amax, cfg.rule, p) - 127);
      block(i, bad, _mm512_set1_ps(-e), _mm512_set1_ps(e));
    }
  }
}

// Runs fn(c, mask) over [c0, c1) in steps of 16.
template <typename Fn>
inline void for_chunks16(int64_t c0, int64_t c1, Fn&& fn) {
  for (int64_t c = c0; c < c1; c += 16)
    fn(c, c1 - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (c1 - c)) - 1));
}

void group_amax(const void* x, InType in, int64_t cols, int64_t gc, int64_t r0, int64_t r1, uint32_t* amax) {
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t cg = 0; cg < ncg; ++cg) {
      __m512i m = _mm512_setzero_si512();
      for_chunks16(cg * gc, std::min(cols, (cg + 1) * gc), [&](int64_t c, __mmask16 k) {
        m = _mm512_max_epu32(m, abs_bits16(load16(x, in, r * cols + c, k)));
      });
      amax[r * ncg + cg] = _mm512_reduce_max_epu32(m);
    }
}

void group_encode(const void* x, InType in, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1, ElemType elem,
                  const float* scales, uint8_t* codes) {
  const SimdElem p(elem);
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t cg = 0; cg < ncg; ++cg) {
      const float s = scales[(r / gr) * ncg + cg];
      const __m512 sv = _mm512_set1_ps(s);
      for_chunks16(cg * gc, std::min(cols, (cg + 1) * gc), [&](int64_t c, __mmask16 k) {
        const int64_t i = r * cols + c;
        const __m512i code = s == 0.0f ? _mm512_setzero_si512() : encode16(_mm512_div_ps(load16(x, in, i, k), sv), p);
        store16(codes + i, code, k);
      });
    }
}

void group_decode(const uint8_t* codes, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1, ElemType elem,
                  const float* scales, float* out) {
  const SimdElem p(elem);
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t cg = 0; cg < ncg; ++cg) {
      const __m512 sv = _mm512_set1_ps(scales[(r / gr) * ncg + cg]);
      for_chunks16(cg * gc, std::min(cols, (cg + 1) * gc), [&](int64_t c, __mmask16 k) {
        const int64_t i = r * cols + c;
        _mm512_mask_storeu_ps(out + i, k, canonical_nan(_mm512_mul_ps(decode16(load_codes16(codes + i, k), p), sv)));
      });
    }
}

void bf16_encode(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_cvtepi32_storeu_epi16(out + i, k, bf16_bits16(_mm512_maskz_loadu_epi32(k, x + i)));
  }
}
void bf16_round(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_epi32(out + i, k, _mm512_slli_epi32(bf16_bits16(_mm512_maskz_loadu_epi32(k, x + i)), 16));
  }
}

}  // namespace

const QuantKernels kAvx512Kernels = {mx_quant_row, mx_quant_col, mx_dequant_row, mx_dequant_col, group_amax,
                                     group_encode, group_decode, bf16_encode,    bf16_round,     mx_round_trip_row};

}  // namespace mxrl::detail
MXRL_END_AVX512
