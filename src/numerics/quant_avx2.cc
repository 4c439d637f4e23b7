// AVX2 quantization kernels (Backend::Avx2, CPUs without AVX-512): the MX
// row quantizer with RNE and the BF16 rounding, the ones a model's prepare
// and its MX activations run; every other entry is the scalar reference.
// Each mirrors its scalar reference in quant_scalar.cc bit for bit
// (quant_backends_test.cc), with the same steps as quant_avx512.cc on 8 lanes.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "numerics/formats.h"
#include "numerics/mx.h"
#include "numerics/quant_kernels.h"
#include "util/target_avx2.h"

MXRL_BEGIN_AVX2_F16C
namespace mxrl::detail {
namespace {

// Element-format constants of encode8, broadcast once per kernel call.
struct Elem8 {
  __m256 max_normal, min_normal, sub_magic;
  __m256i sub_magic_bits, round_half, exp_adjust, nan_code, sign_in, one, abs_mask;
  __m128i shift, sign_shift;
  explicit Elem8(ElemType t) {
    const ElemTraits& f = elem_traits(t);
    const int sh = 23 - f.mbits;
    max_normal = _mm256_set1_ps(f.max_normal);
    min_normal = _mm256_set1_ps(std::ldexp(1.0f, f.emin()));
    // Adding 2^(emin - mbits + 23) rounds (RNE) to a multiple of the subnormal step.
    const float magic = std::ldexp(1.0f, f.emin() - f.mbits + 23);
    sub_magic = _mm256_set1_ps(magic);
    sub_magic_bits = _mm256_set1_epi32(static_cast<int>(f32_bits(magic)));
    round_half = _mm256_set1_epi32((1 << (sh - 1)) - 1);
    exp_adjust = _mm256_set1_epi32((127 - f.bias) << f.mbits);
    nan_code = _mm256_set1_epi32(f.has_nan ? f.nan_code : 0);
    sign_in = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    one = _mm256_set1_epi32(1);
    abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
    shift = _mm_cvtsi32_si128(sh);
    sign_shift = _mm_cvtsi32_si128(32 - f.bits);
  }
};

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

void mx_quant_row(const void* x, InType in, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, uint8_t* codes,
                  uint8_t* scales) {
  if (cfg.round != Rounding::RNE) return kScalarKernels.mx_quant_row(x, in, cols, r0, r1, cfg, codes, scales);
  const Elem8 p(cfg.elem);
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
      // x * 2^(127 - s): one correctly rounded product (2^-127 is an FP32 subnormal, exact).
      const __m256 mul = _mm256_set1_ps(std::ldexp(1.0f, 127 - static_cast<int>(s)));
      __m256i c[4];
      for (int q = 0; q < 4; ++q) c[q] = encode8(_mm256_mul_ps(v[q], mul), p);
      store32(codes + i, c[0], c[1], c[2], c[3]);
    }
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
  t.bf16_encode = bf16_encode;
  t.bf16_round = bf16_round;
  return t;
}();
}  // namespace mxrl::detail
#endif  // __x86_64__
