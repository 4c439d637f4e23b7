// The weight decoding shared by the AVX-512 GEMM kernels (gemm_avx512.cc: FP32
// FMA chains; gemm_pairs_avx512.h: the BF16 pair chains): register tiles over
// K-major 32-column panels, the panel's elements widened or decoded to FP32
// exactly. Include only inside an AVX-512 region, after <immintrin.h> and
// numerics/simd_avx512.h.
#pragma once

namespace mxrl::detail {
namespace {
constexpr int kPanel = PackedWeight::kPanel;
constexpr int kMr = 12;         // rows of a register tile (blocked path): 24 accumulators
constexpr int64_t kMc = 192;    // rows per block handed to run(); a multiple of kMr
constexpr int64_t kKc = 256;    // K per cache block of the FP32 kernels (scratch slice 32 KiB); pairs: kKcPairs
constexpr int kDirectRows = 6;  // up to this many rows: decode on the fly

// How a panel's weights become FP32. Fast20 / Fast21: E4M3 / E5M2 codes of a
// fast panel (the shift 23 - mbits as an immediate); Generic: exact decode.
// Lut8 (BF16 pair kernels only): MX E4M3 codes of a panel_lut panel straight
// to BF16 pairs by table lookup (gemm_pairs_avx512.h).
enum class Src { F32, BF16, Fast20, Fast21, Generic, Lut8 };
constexpr bool is_fast(Src s) { return s == Src::Fast20 || s == Src::Fast21; }
constexpr int fast_shift(Src s) { return s == Src::Fast20 ? 20 : 21; }

struct Ctx {
  WFormat fmt;
  __m512i magsign;  // sign bit and the magnitude bits after the shift (fast)
  __m512i fold;     // 127 - bias, added to E8M0 bytes (fast, MX)
  SimdElem elem;    // Generic: exact decode
  explicit Ctx(const PackedWeight& w) : fmt(w.format()), elem(w.elem()) {
    const ElemTraits& f = elem_traits(w.elem());
    const int sh = 23 - f.mbits;
    magsign = _mm512_set1_epi32(static_cast<int>(0x80000000u | (0x7Fu << sh)));
    fold = _mm512_set1_epi32(127 - f.bias);
  }
};

inline __m512 nan_canonical(__m512 v) {
  return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                            _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kGemmNan))));
}

inline __mmask16 lane_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}

// RNE to BF16 with DAZ, as VCVTNE2PS2BF16 (and bf16_dot_round in gemm.cc):
// 16 FP32 lanes to 16 BF16 values in the low halves of 32-bit lanes.
inline __m512i bf16_rne_daz16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i exp = _mm512_and_si512(b, _mm512_set1_epi32(0x7F800000));
  const __m512i mant = _mm512_and_si512(b, _mm512_set1_epi32(0x007FFFFF));
  const __mmask16 sub = _mm512_cmpeq_epi32_mask(exp, _mm512_setzero_si512());
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(exp, _mm512_set1_epi32(0x7F800000)) &
                        _mm512_cmpneq_epi32_mask(mant, _mm512_setzero_si512());
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_srli_epi32(_mm512_or_si512(b, _mm512_set1_epi32(0x00400000)), 16));
  return _mm512_mask_mov_epi32(r, sub, _mm512_srli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80000000u)), 16));
}

// The two scale vectors (columns 0-15, 16-31) of group g of panel p.
template <Src S>
inline void load_scales(const PackedWeight& w, int64_t p, int64_t g, const Ctx& c, __m512& s0, __m512& s1) {
  if constexpr (S == Src::F32 || S == Src::BF16) {
    return;
  } else if (c.fmt == WFormat::MX) {
    const uint8_t* b = w.panel_mx_scales(p) + g * kPanel;
    const __m512i b0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    const __m512i b1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16)));
    if constexpr (is_fast(S)) {
      // 2^(b - bias): the scale folded with the 2^(127 - bias) the shifted code lacks.
      const __m512i nan = _mm512_set1_epi32(static_cast<int>(kGemmNan)), ff = _mm512_set1_epi32(0xFF);
      s0 = _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(_mm512_add_epi32(b0, c.fold), 23),
                                                     _mm512_cmpeq_epi32_mask(b0, ff), nan));
      s1 = _mm512_castsi512_ps(_mm512_mask_mov_epi32(_mm512_slli_epi32(_mm512_add_epi32(b1, c.fold), 23),
                                                     _mm512_cmpeq_epi32_mask(b1, ff), nan));
    } else {
      s0 = e8m0_to_f32_16(b0);
      s1 = e8m0_to_f32_16(b1);
    }
  } else {  // FP8: stored folded for fast panels
    const float* s = w.panel_fp8_scales(p) + g * kPanel;
    s0 = _mm512_loadu_ps(s);
    s1 = _mm512_loadu_ps(s + 16);
  }
}

// Weights w[k][0..15], w[k][16..31] of a panel whose element storage is `base`.
template <Src S>
inline void load_w(const void* base, int64_t k, __m512 s0, __m512 s1, const Ctx& c, __m512& w0, __m512& w1) {
  if constexpr (S == Src::F32) {
    const float* b = static_cast<const float*>(base) + k * kPanel;
    w0 = _mm512_loadu_ps(b);
    w1 = _mm512_loadu_ps(b + 16);
  } else if constexpr (S == Src::BF16) {
    const __m512i v = _mm512_loadu_si512(static_cast<const uint16_t*>(base) + k * kPanel);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  } else {
    // 32 codes, the pair of 16-bit lanes 2i, 2i+1 holding columns i and 16 + i.
    const __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(base) + k * kPanel));
    if constexpr (is_fast(S)) {
      // Sign-extended code << (23 - mbits), per 32-bit lane: the magnitude bits land in
      // the FP32 exponent and mantissa fields (the value times 2^-(127 - bias),
      // subnormal codes included), sign copies fill the bits above and the mask
      // keeps bit 31 of them. The other 16-bit half shifts out or is masked off.
      const __m512i v = _mm512_cvtepi8_epi16(raw);
      constexpr int sh = fast_shift(S);
      w0 = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, sh), c.magsign)), s0);
      w1 = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(v, sh - 16), c.magsign)), s1);
    } else {
      const __m512i v = _mm512_cvtepu8_epi16(raw);
      const __m512i c0 = _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF)), c1 = _mm512_srli_epi32(v, 16);
      w0 = _mm512_mul_ps(decode16(c0, c.elem), s0);
      w1 = _mm512_mul_ps(decode16(c1, c.elem), s1);
    }
  }
}

// fn(g, ka, kb) over the scale groups of [k0, k1) (one group when unscaled).
template <Src S, typename Fn>
inline void for_groups(const PackedWeight& w, int64_t k0, int64_t k1, Fn&& fn) {
  if constexpr (S == Src::F32 || S == Src::BF16) {
    fn(int64_t(0), k0, k1);
  } else {
    const int64_t gk = w.group_k();
    for (int64_t g = k0 / gk; g * gk < k1; ++g) fn(g, std::max(k0, g * gk), std::min(k1, (g + 1) * gk));
  }
}

inline void store_row(float* y, __m512 v0, __m512 v1, __mmask16 m0, __mmask16 m1, bool last) {
  if (last) {
    v0 = nan_canonical(v0);
    v1 = nan_canonical(v1);
  }
  if (m1 == 0xFFFF) {
    _mm512_storeu_ps(y, v0);
    _mm512_storeu_ps(y + 16, v1);
  } else {
    _mm512_mask_storeu_ps(y, m0, v0);
    _mm512_mask_storeu_ps(y + 16, m1, v1);
  }
}

// Panel p, k in [k0, k1) as FP32 [k][32] into out.
template <Src S>
void decode_panel(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, float* out, const Ctx& c) {
  const void* base = w.panel_data(p);
  for_groups<S>(w, k0, k1, [&](int64_t g, int64_t ka, int64_t kb) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    load_scales<S>(w, p, g, c, s0, s1);
    for (int64_t k = ka; k < kb; ++k) {
      __m512 w0, w1;
      load_w<S>(base, k, s0, s1, c, w0, w1);
      _mm512_store_ps(out + (k - k0) * kPanel, w0);
      _mm512_store_ps(out + (k - k0) * kPanel + 16, w1);
    }
  });
}

}  // namespace
}  // namespace mxrl::detail
