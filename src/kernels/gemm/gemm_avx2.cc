// AVX2 + FMA GEMM backend (Backend::Avx2): for CPUs without AVX-512. Every
// output lane runs the contract's chain exactly as the scalar reference
// (gemm_scalar.cc; gemm_test.cc checks it bit for bit on every engine):
//   - BF16 and MX weights, the pair chain: x rounded to BF16 (RNE, DAZ) once
//     per call, weights decoded exactly and made DAZ, then per pair two FMAs,
//     odd element first, under MXCSR FTZ (so a result below FP32's normal
//     range is a signed zero, as the contract's step says);
//   - FP32 and FP8 weights: y = fma(x[k], w[k], y) for k in order, MXCSR untouched.
// Per panel (32 columns) the weights of all of K are decoded once into an FP32
// buffer, columns in order ([k][32], as the reference's panel_values), then
// every 6-row tile of X runs its 6 x 16 chains over each half in registers. MX E4M3 /
// E5M2 codes of a fast panel decode in registers (the code shifted into the
// FP32 fields, times the folded power-of-two scale: one exact product); other
// panels (NaN or Inf codes, FP6/FP4 elements, FP8) take the reference decode.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gemm/gemm.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/target_avx2.h"

namespace mxrl::detail {
namespace {
constexpr int kPanel = PackedWeight::kPanel;
constexpr int kTileRows = 6;        // 6 rows x 16 columns of accumulators, 2 weights, a broadcast: the 16 registers
constexpr int64_t kBlockRows = 96;  // rows per call handed to run(); a multiple of kTileRows
constexpr int64_t kKc = 128;        // K per block of the buffered path: 16 KiB of FP32 weights, in L1

// Per-thread buffers: the panel's decoded weights and the call's X rows (pair
// chain: rounded to BF16, with one zero past K so an odd K's last pair is 0 * 0).
struct Scratch {
  std::vector<float> w, x;
};
Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}
}  // namespace
}  // namespace mxrl::detail

MXRL_BEGIN_AVX2
namespace mxrl::detail {
namespace {

// Signed zero for every lane whose exponent field is zero (DAZ on a BF16 or
// FP32 value held as FP32 bits).
inline __m256 daz8(__m256 v) {
  const __m256i b = _mm256_castps_si256(v);
  const __m256i sub = _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
  return _mm256_castsi256_ps(
      _mm256_blendv_epi8(b, _mm256_and_si256(b, _mm256_set1_epi32(static_cast<int>(0x80000000u))), sub));
}

// bf16_dot_round (RNE to BF16, DAZ) of x[0, n) into out.
void round_x(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i exp = _mm256_and_si256(b, _mm256_set1_epi32(0x7F800000));
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i rne = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)),
                         _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1))),
        hi);
    // NaN (|b| above Inf's bits, a signed compare of values below 2^31): quieted, truncated.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7FFFFFFF)),
                                           _mm256_set1_epi32(0x7F800000));
    __m256i r = _mm256_blendv_epi8(rne, _mm256_and_si256(_mm256_or_si256(b, _mm256_set1_epi32(0x00400000)), hi), nan);
    r = _mm256_blendv_epi8(r, _mm256_and_si256(b, _mm256_set1_epi32(static_cast<int>(0x80000000u))),
                           _mm256_cmpeq_epi32(exp, _mm256_setzero_si256()));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), r);
  }
  for (; k < n; ++k) out[k] = bf16_dot_round(x[k]);
}

// BF16 panel, k in [0, K): the pair at 2i, 2i+1 holds columns i and 16 + i,
// so 8 32-bit lanes from pair 8q give columns 8q.. (low halves) and 16 + 8q.. (high).
// Rows [k0, k1) into out[(k - k0) * 32 ..].
void decode_bf16(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, float* out) {
  const auto* s = static_cast<const uint16_t*>(w.panel_data(p));
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t k = k0; k < k1; ++k)
    for (int q = 0; q < 2; ++q) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k * kPanel + 16 * q));
      float* o = out + (k - k0) * kPanel;
      _mm256_storeu_ps(o + 8 * q, daz8(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16))));
      _mm256_storeu_ps(o + 16 + 8 * q, daz8(_mm256_castsi256_ps(_mm256_and_si256(v, hi))));
    }
}

// 8 codes (the low 8 bytes), sign-extended, shifted left by Sh = 23 - mbits
// into the FP32 fields, masked to sign and magnitude, times their scales: the
// one MX decode of both paths (decode_mx_fast, and mx_w8 on the direct path).
template <int Sh>
inline __m256 code_values(__m128i bytes8, __m256i magsign, __m256 s) {
  const __m256i v = _mm256_and_si256(_mm256_slli_epi32(_mm256_cvtepi8_epi32(bytes8), Sh), magsign);
  return _mm256_mul_ps(_mm256_castsi256_ps(v), s);
}

// 8 E8M0 scale bytes (the low 8 bytes) as FP32 2^(s + fold - 127), NaN for 0xFF.
inline __m256 folded_scales8(__m128i bytes8, int fold) {
  const __m256i e = _mm256_cvtepu8_epi32(bytes8);
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(fold)), 23);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(bits, _mm256_set1_epi32(static_cast<int>(kGemmNan)),
                                                _mm256_cmpeq_epi32(e, _mm256_set1_epi32(0xFF))));
}

// MX E4M3 / E5M2 codes of a fast panel (panel_fast: no NaN or Inf code, every
// scale byte plus 127 - bias below 255). The code, sign-extended and shifted
// left by 23 - mbits, masked to the sign and magnitude fields, is the value
// times 2^-(127 - bias) (subnormal codes too); times 2^(s + 127 - bias - 127)
// it is the value times the scale in one exact product (NaN for a NaN scale).
// Under FTZ a product below FP32's normal range is a signed zero: the DAZ the
// pair chain applies to it. Bytes 16q.. hold columns 8q.. (even bytes) and 16 + 8q.. (odd).
// Rows [k0, k1) (multiples of 32) into out[(k - k0) * 32 ..]. Sh: 23 - mbits.
template <int Sh>
void decode_mx_fast_t(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, float* out) {
  const int fold = 127 - elem_traits(w.elem()).bias;
  const __m256i magsign = _mm256_set1_epi32(static_cast<int>(0x80000000u | (0x7Fu << Sh)));
  const __m128i split = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const auto* codes = static_cast<const uint8_t*>(w.panel_data(p));
  const uint8_t* sc = w.panel_mx_scales(p);
  for (int64_t g = k0 / kMxBlock; g < k1 / kMxBlock; ++g) {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + g * kPanel));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + g * kPanel + 16));
    const __m256 s0 = folded_scales8(lo, fold), s1 = folded_scales8(_mm_srli_si128(lo, 8), fold),
                 s2 = folded_scales8(hi, fold), s3 = folded_scales8(_mm_srli_si128(hi, 8), fold);
    for (int64_t k = g * kMxBlock; k < (g + 1) * kMxBlock; ++k) {
      const uint8_t* c = codes + k * kPanel;
      float* o = out + (k - k0) * kPanel;
      const __m128i a = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)), split);
      const __m128i b = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 16)), split);
      _mm256_storeu_ps(o, code_values<Sh>(a, magsign, s0));
      _mm256_storeu_ps(o + 8, code_values<Sh>(b, magsign, s1));
      _mm256_storeu_ps(o + 16, code_values<Sh>(_mm_srli_si128(a, 8), magsign, s2));
      _mm256_storeu_ps(o + 24, code_values<Sh>(_mm_srli_si128(b, 8), magsign, s3));
    }
  }
}
// E4M3 (Sh 20) or E5M2 (Sh 21), chosen once per call.
void decode_mx_fast(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, float* out) {
  if (w.elem() == ElemType::E4M3) return decode_mx_fast_t<20>(w, p, k0, k1, out);
  decode_mx_fast_t<21>(w, p, k0, k1, out);
}

// One row's 32 chains (a panel: the direct path), named for the same reason.
struct Acc4 {
  __m256 v0, v1, v2, v3;
};

inline void fma4(Acc4& a, const float* x, __m256 w0, __m256 w1, __m256 w2, __m256 w3) {
  const __m256 b = _mm256_broadcast_ss(x);
  a.v0 = _mm256_fmadd_ps(b, w0, a.v0);
  a.v1 = _mm256_fmadd_ps(b, w1, a.v1);
  a.v2 = _mm256_fmadd_ps(b, w2, a.v2);
  a.v3 = _mm256_fmadd_ps(b, w3, a.v3);
}
constexpr float kZero = 0.0f;

// One row's 16 chains (half a panel). Named variables, one per row: GCC
// keeps an array of accumulators in memory, storing each on every step.
struct Acc2 {
  __m256 v0, v1;
};

inline void fma2(Acc2& a, const float* x, __m256 w0, __m256 w1) {
  const __m256 b = _mm256_broadcast_ss(x);
  a.v0 = _mm256_fmadd_ps(b, w0, a.v0);
  a.v1 = _mm256_fmadd_ps(b, w1, a.v1);
}

// a_r = fma(x_r[k], w[k][half], a_r) for rows r < R: 12 chains, 2 weight
// vectors and a broadcast in the 16 registers, 8 loads per 12 FMAs.
template <int R>
inline void step(Acc2& a0, Acc2& a1, Acc2& a2, Acc2& a3, Acc2& a4, Acc2& a5, const float* x0, const float* x1,
                 const float* x2, const float* x3, const float* x4, const float* x5, const float* wp, int64_t k) {
  __m256 w0 = _mm256_loadu_ps(wp + k * kPanel), w1 = _mm256_loadu_ps(wp + k * kPanel + 8);
  // In registers, loaded once: left to itself GCC folds the loads into each
  // row's FMA, 12 vector loads per step instead of 2, and the loads bound it.
  __asm__("" : "+x"(w0), "+x"(w1));
  fma2(a0, x0 + k, w0, w1);
  if constexpr (R > 1) fma2(a1, x1 + k, w0, w1);
  if constexpr (R > 2) fma2(a2, x2 + k, w0, w1);
  if constexpr (R > 3) fma2(a3, x3 + k, w0, w1);
  if constexpr (R > 4) fma2(a4, x4 + k, w0, w1);
  if constexpr (R > 5) fma2(a5, x5 + k, w0, w1);
}

// A row's partial sums of columns [0, n) from y (first: zero), and back to y
// (last: NaN made canonical).
inline Acc2 load_acc(const float* y, int n, bool first) {
  if (first) return {_mm256_setzero_ps(), _mm256_setzero_ps()};
  if (n == 16) return {_mm256_loadu_ps(y), _mm256_loadu_ps(y + 8)};
  alignas(32) float out[16] = {};
  std::memcpy(out, y, static_cast<size_t>(n) * sizeof(float));
  return {_mm256_load_ps(out), _mm256_load_ps(out + 8)};
}
inline __m256 canonical8(__m256 v) {
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kGemmNan))),
                          _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}
inline void store_acc(const Acc2& a, float* y, int n, bool last) {
  const __m256 v0 = last ? canonical8(a.v0) : a.v0, v1 = last ? canonical8(a.v1) : a.v1;
  if (n == 16) {
    _mm256_storeu_ps(y, v0);
    _mm256_storeu_ps(y + 8, v1);
    return;
  }
  alignas(32) float out[16];
  _mm256_store_ps(out, v0);
  _mm256_store_ps(out + 8, v1);
  std::memcpy(y, out, static_cast<size_t>(n) * sizeof(float));
}

// Rows [0, R) of a tile, K block [k0, k1): y[r][0..cols) continues the chain
// over K of xr[r] and the panel's FP32 weights from the partial sums the
// previous block left there (first: from zero), the canonical NaN on the last
// block; one half panel (16 columns) at a time. wp holds rows k0..
// ([k1 - k0 (+1)][32]); pairs: k0 is even, and an odd K's last pair reads
// xr[r][K] and wp's row K - k0, both zero.
template <int R, bool Pairs>
void tile(const float* const* xr, const float* wp, int64_t k0, int64_t k1, float* const* yr, int cols, bool first,
          bool last) {
  const float* x0 = xr[0];
  const float* x1 = R > 1 ? xr[1] : x0;
  const float* x2 = R > 2 ? xr[2] : x0;
  const float* x3 = R > 3 ? xr[3] : x0;
  const float* x4 = R > 4 ? xr[4] : x0;
  const float* x5 = R > 5 ? xr[5] : x0;
  for (int h = 0; h < 2; ++h) {
    const int c0 = 16 * h, n = std::min(cols - c0, 16);
    if (n <= 0) break;
    Acc2 a[6] = {};  // loaded into named variables below
    for (int r = 0; r < R; ++r) a[r] = load_acc(yr[r] + c0, n, first);
    Acc2 a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5];
    const float* w = wp - k0 * kPanel + c0;
    if constexpr (Pairs) {
      for (int64_t k = k0; k < k1; k += 2) {  // odd element first
        step<R>(a0, a1, a2, a3, a4, a5, x0, x1, x2, x3, x4, x5, w, k + 1);
        step<R>(a0, a1, a2, a3, a4, a5, x0, x1, x2, x3, x4, x5, w, k);
      }
    } else {
      for (int64_t k = k0; k < k1; ++k) step<R>(a0, a1, a2, a3, a4, a5, x0, x1, x2, x3, x4, x5, w, k);
    }
    const Acc2 out[6] = {a0, a1, a2, a3, a4, a5};
    for (int r = 0; r < R; ++r) store_acc(out[r], yr[r] + c0, n, last);
  }
}

// ---------------------------------------------------------------------------
// Direct path (1 or 2 rows, decode-bound: M = 1 sampling): BF16 and fast MX
// panels decoded on the fly into registers, R rows x NP panels of chains in
// flight, no buffer. BF16 lanes come out in column groups (0-7, 16-23, 8-15,
// 24-31 for the four vectors); MX lanes in the packed byte order (lane l of
// vector v is byte 8v + l: column (8v + l) / 2, plus 16 when odd), so the
// scales are loaded in that order and the outputs stored through it.
constexpr int kDirectRows = 2;

inline int mx_lane_col(int pos) { return pos % 2 == 0 ? pos / 2 : 16 + pos / 2; }

// 8 codes at c times their folded scales sc[0..8) (code_values).
template <int Sh>
inline __m256 mx_w8(const uint8_t* c, __m256i magsign, const float* sc) {
  return code_values<Sh>(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)), magsign, _mm256_load_ps(sc));
}

template <int Sh>
struct DirectPanel {
  const uint8_t* base;       // panel elements
  const uint8_t* scales;     // MX: E8M0 bytes [k/32][32]
  alignas(32) float sc[32];  // MX: the current group's folded scales, packed lane order
};

// Weights w[k][..] of one panel as 4 vectors (see above).
template <int Sh>
inline void direct_w(const DirectPanel<Sh>& d, int64_t k, __m256i magsign, Acc4& w) {
  if constexpr (Sh != 0) {
    const uint8_t* c = d.base + k * kPanel;
    w.v0 = mx_w8<Sh>(c, magsign, d.sc);
    w.v1 = mx_w8<Sh>(c + 8, magsign, d.sc + 8);
    w.v2 = mx_w8<Sh>(c + 16, magsign, d.sc + 16);
    w.v3 = mx_w8<Sh>(c + 24, magsign, d.sc + 24);
  } else {
    const auto* s = reinterpret_cast<const uint16_t*>(d.base) + k * kPanel;
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 16));
    w.v0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
    w.v1 = _mm256_castsi256_ps(_mm256_and_si256(v0, hi));
    w.v2 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
    w.v3 = _mm256_castsi256_ps(_mm256_and_si256(v1, hi));
  }
}

// The group's 32 scales (E8M0, columns in order) as FP32 2^(s + fold - 127)
// (NaN for 0xFF) in the packed lane order: interleaved as the codes are.
inline void load_lane_scales(const uint8_t* s, int fold, float* out) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
  const __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi);  // positions 0-15, 16-31
  const __m128i bytes[4] = {a, _mm_srli_si128(a, 8), b, _mm_srli_si128(b, 8)};
  for (int v = 0; v < 4; ++v) _mm256_store_ps(out + 8 * v, folded_scales8(bytes[v], fold));
}

// One step of the direct path's chains: a holds row 0 of panel p; b row 0
// of panel p + 1 (NP = 2) or row 1 of panel p (R = 2).
template <int R, int NP, int Sh>
inline void direct_step(Acc4& a, Acc4& b, const float* x0, const float* x1, const DirectPanel<Sh>* d, int64_t k,
                        __m256i magsign) {
  Acc4 w;
  direct_w<Sh>(d[0], k, magsign, w);
  fma4(a, x0 + k, w.v0, w.v1, w.v2, w.v3);
  if constexpr (R == 2) fma4(b, x1 + k, w.v0, w.v1, w.v2, w.v3);
  if constexpr (NP == 2) {
    direct_w<Sh>(d[1], k, magsign, w);
    fma4(b, x0 + k, w.v0, w.v1, w.v2, w.v3);
  }
}

// Rows xr[0..R) (BF16-rounded, K + 1 values) x panels p .. p + NP - 1 of a
// BF16 or fast-MX weight: the pair chain, outputs to yr[r] + q * 32.
template <int R, int NP, int Sh>
void direct(const float* const* xr, const PackedWeight& w, int64_t p, float* const* yr) {
  constexpr bool Mx = Sh != 0;
  const int64_t K = w.k(), N = w.n();
  const int fold = Mx ? 127 - elem_traits(w.elem()).bias : 0;
  const __m256i magsign = _mm256_set1_epi32(static_cast<int>(0x80000000u | (0x7Fu << Sh)));
  DirectPanel<Sh> d[NP];
  for (int q = 0; q < NP; ++q) {
    d[q].base = static_cast<const uint8_t*>(w.panel_data(p + q));
    if constexpr (Mx) d[q].scales = w.panel_mx_scales(p + q);
  }
  static_assert(R * NP <= 2, "two sets of 32 chains: R = 1, NP <= 2 or R = 2, NP = 1");
  Acc4 a{}, b{};  // named, in registers (see direct_step)
  const float* x0 = xr[0];
  const float* x1 = R > 1 ? xr[1] : x0;
  const int64_t K2 = K / 2 * 2;
  const int64_t gk = Mx ? kMxBlock : K2;  // MX: one scale group at a time (K is a multiple of 32)
  for (int64_t g0 = 0; g0 < K2; g0 += gk) {
    if constexpr (Mx)
      for (int q = 0; q < NP; ++q) load_lane_scales(d[q].scales + (g0 / kMxBlock) * kPanel, fold, d[q].sc);
    for (int64_t k = g0; k < g0 + gk; k += 2) {  // odd element first
      direct_step<R, NP, Sh>(a, b, x0, x1, d, k + 1, magsign);
      direct_step<R, NP, Sh>(a, b, x0, x1, d, k, magsign);
    }
  }
  if (K2 < K) {  // odd K (BF16): the last pair is (0 * 0, x * w)
    const __m256 z = _mm256_setzero_ps();
    fma4(a, &kZero, z, z, z, z);  // 0 * 0 + acc, as the chain's first FMA of the pair
    fma4(b, &kZero, z, z, z, z);
    direct_step<R, NP, Sh>(a, b, x0, x1, d, K2, magsign);
  }
  const Acc4 acc[2] = {a, b};
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kGemmNan)));
  alignas(32) float out[kPanel];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < NP; ++q) {
      const Acc4& c = acc[r + q];
      const __m256 cv[4] = {c.v0, c.v1, c.v2, c.v3};
      for (int v = 0; v < 4; ++v)
        _mm256_store_ps(out + 8 * v, _mm256_blendv_ps(cv[v], nan, _mm256_cmp_ps(cv[v], cv[v], _CMP_UNORD_Q)));
      float* y = yr[r] + q * kPanel;
      const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - (p + q) * kPanel));
      for (int l = 0; l < kPanel; ++l) {
        // BF16: vector v = 2q' + h holds columns 8q' + 16h + (l % 8).
        const int col = Mx ? mx_lane_col(l) : (l / 16) * 8 + ((l / 8) % 2) * 16 + l % 8;
        if (col < cols) y[col] = out[l];
      }
    }
}

// Rows [0, rows <= kDirectRows) x panels [p0, p1) on the direct path, for
// the panels it decodes (BF16, fast MX E4M3 / E5M2); false for the others.
bool direct_panel(const PackedWeight& w, int64_t p) {
  if (w.format() == WFormat::BF16) return true;
  return w.format() == WFormat::MX && (w.elem() == ElemType::E4M3 || w.elem() == ElemType::E5M2) && w.panel_fast(p);
}

template <int Sh>
void run_direct_t(const float* const* xr, const PackedWeight& w, float* y, int64_t rows, int64_t p0, int64_t p1) {
  const int64_t N = w.n();
  for (int64_t p = p0; p < p1;) {
    float* yr[kDirectRows];
    for (int r = 0; r < rows; ++r) yr[r] = y + r * N + p * kPanel;
    if (rows == 1 && p + 1 < p1) {
      direct<1, 2, Sh>(xr, w, p, yr);
      p += 2;
    } else {
      if (rows == 1)
        direct<1, 1, Sh>(xr, w, p, yr);
      else
        direct<2, 1, Sh>(xr, w, p, yr);
      p += 1;
    }
  }
}

// Rows [0, rows) x panels [p0, p1), every one direct_panel.
void run_direct(const float* xb, int64_t xs, const PackedWeight& w, float* y, int64_t rows, int64_t p0, int64_t p1) {
  const float* xr[kDirectRows];
  for (int r = 0; r < rows; ++r) xr[r] = xb + r * xs;
  if (w.format() == WFormat::BF16) return run_direct_t<0>(xr, w, y, rows, p0, p1);
  if (w.elem() == ElemType::E4M3) return run_direct_t<20>(xr, w, y, rows, p0, p1);
  return run_direct_t<21>(xr, w, y, rows, p0, p1);
}

template <bool Pairs>
void run_rows(const float* x, int64_t xs, const float* wp, int64_t k0, int64_t k1, float* y, int64_t N, int64_t rows,
              int cols, bool first, bool last) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const int R = static_cast<int>(std::min<int64_t>(kTileRows, rows - r0));
    const float* xr[kTileRows];
    float* yr[kTileRows];
    for (int r = 0; r < R; ++r) xr[r] = x + (r0 + r) * xs, yr[r] = y + (r0 + r) * N;
    switch (R) {
      case 6: tile<6, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
      case 5: tile<5, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
      case 4: tile<4, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
      case 3: tile<3, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
      case 2: tile<2, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
      default: tile<1, Pairs>(xr, wp, k0, k1, yr, cols, first, last); break;
    }
  }
}

// Panel p through an FP32 buffer (every format; any number of rows), in K
// blocks of kKc whose decoded weights stay in L1 while every row tile runs
// over them; each block continues the exact partial sums the previous one
// left in Y, so the chain over K is unchanged. Panels the vector decode does
// not cover (NaN or Inf codes, FP6 / FP4 elements, FP8) are decoded whole by
// the reference's panel_values, as one block.
void run_buffered(const float* xp, int64_t xs, const PackedWeight& w, float* y, int64_t m0, int64_t rows, int64_t p,
                  bool pairs, Scratch& s) {
  const int64_t N = w.n(), K = w.k();
  const int cols = static_cast<int>(std::min<int64_t>(kPanel, N - p * kPanel));
  float* yp = y + m0 * N + p * kPanel;
  const bool f32 = w.format() == WFormat::F32, bf16 = w.format() == WFormat::BF16;
  const bool fast = direct_panel(w, p);  // the panels decode_bf16 / decode_mx_fast cover
  if (!f32 && !fast) {                   // the reference decode (resizes to K rows), DAZ for the pair chain
    panel_values(w, p, s.w);
    if (pairs)
      for (float& v : s.w) v = bf16_dot_daz(v);
    s.w.resize(static_cast<size_t>((K + 1) * kPanel), 0.0f);
    std::fill(s.w.begin() + K * kPanel, s.w.end(), 0.0f);  // the odd K's 0 * 0
    if (pairs)
      run_rows<true>(xp, xs, s.w.data(), 0, K, yp, N, rows, cols, true, true);
    else
      run_rows<false>(xp, xs, s.w.data(), 0, K, yp, N, rows, cols, true, true);
    return;
  }
  s.w.resize(static_cast<size_t>((kKc + 1) * kPanel));
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t k1 = std::min(K, k0 + kKc);
    const float* wp;
    if (f32) {
      wp = static_cast<const float*>(w.panel_data(p)) + k0 * kPanel;
    } else {
      if (bf16)
        decode_bf16(w, p, k0, k1, s.w.data());
      else
        decode_mx_fast(w, p, k0, k1, s.w.data());
      // An odd K's 0 * 0: the row after the last (BF16 only; MX K is a multiple of 32).
      std::fill(s.w.begin() + (k1 - k0) * kPanel, s.w.begin() + (k1 - k0 + 1) * kPanel, 0.0f);
      wp = s.w.data();
    }
    if (pairs)
      run_rows<true>(xp, xs, wp, k0, k1, yp, N, rows, cols, k0 == 0, k1 == K);
    else
      run_rows<false>(xp, xs, wp, k0, k1, yp, N, rows, cols, k0 == 0, k1 == K);
  }
}

void run(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t N = w.n(), K = w.k(), rows = m1 - m0;
  const bool pairs = pair_contract(w.format());
  Scratch& s = scratch();
  // The pair chain under MXCSR FTZ, and for BF16 weights DAZ too (the direct
  // path's DAZ on their subnormals; X and the sums are never subnormal). MX
  // weights keep DAZ off: their decode multiplies subnormal FP32 bit patterns.
  // FP32 and FP8 chains keep MXCSR as it is. (Set after X is rounded.)
  const float* xp = x + m0 * K;
  int64_t xs = K;
  if (pairs) {  // X rows to BF16 values, once per call
    xs = K + 1;
    s.x.resize(static_cast<size_t>(rows * xs));
    for (int64_t r = 0; r < rows; ++r) {
      round_x(xp + r * K, K, s.x.data() + r * xs);
      s.x[r * xs + K] = 0.0f;
    }
    xp = s.x.data();
  }
  struct Mxcsr {
    unsigned csr = _mm_getcsr();
    explicit Mxcsr(unsigned set) { _mm_setcsr(csr | set); }
    ~Mxcsr() { _mm_setcsr(csr); }
  } mxcsr(!pairs ? 0u : w.format() == WFormat::BF16 ? 0x8040u : 0x8000u);
  if (pairs && rows <= kDirectRows) {
    // Runs of panels the direct path decodes; the others one by one below.
    for (int64_t p = p0; p < p1;) {
      int64_t e = p;
      while (e < p1 && direct_panel(w, e)) ++e;
      if (e > p) {
        run_direct(xp, xs, w, y + m0 * N, rows, p, e);
        p = e;
      } else {
        run_buffered(xp, xs, w, y, m0, rows, p, pairs, s);
        ++p;
      }
    }
    return;
  }
  for (int64_t p = p0; p < p1; ++p) run_buffered(xp, xs, w, y, m0, rows, p, pairs, s);
}

}  // namespace

const GemmKernels kGemmAvx2 = {run, kBlockRows, kTileRows};

}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
