// The BF16 pair chain of the GEMM contract (gemm.h) for BF16 and MX weights,
// written once over a multiply-accumulate policy and compiled twice:
//   - Dot (gemm_avx512_bf16.cc): VDPBF16PS, 32 products per instruction;
//   - Fma (gemm_avx512.cc): two FP32 FMAs per pair, odd element first, under
//     MXCSR FTZ + DAZ, on CPUs without AVX512_BF16 or whose VDPBF16PS failed
//     the self-test.
// Operands travel as 32-bit lanes holding a BF16 pair (element 2i in the low
// half, 2i+1 in the high half), as VDPBF16PS reads them:
//   - X rows are converted once per call (Mac::to_bf16: RNE, DAZ) into pairs;
//   - weights are decoded to FP32 exactly as the FP32 kernels do (BF16
//     widened; MX codes times their E8M0 scale, exact in BF16 for normal
//     values) and two K rows are merged into pairs by keeping each value's top
//     16 bits: exact for BF16 values, and a value below BF16's normal range
//     becomes a BF16 subnormal that the product treats as zero, as the
//     contract's DAZ says.
// Include only inside an AVX-512 region, after gemm_avx512_common.h, with a
// Mac policy type defined (and kernels/gemm/aligned_scratch.h included before the region).
#pragma once

namespace mxrl::detail {
namespace {

// K per cache block of the blocked path: the decoded panel slice (kKcPairs / 2
// pair rows x 32 columns, 64 KiB) lives in L2 and every tile reads it there;
// fewer, longer blocks reload and store the partial sums in Y less often. On
// a Zen 4 EPYC (2 threads; M = 32-4096, N and K 256-151936, two interleaved
// runs) 1024 ran the GEMM at 0.78-0.96x oneDNN's BF16 matmul against
// 0.50-0.89x with 256 (the FP32 path's kKc); 128 was slower still. Any block
// size gives the same bits (gemm_test's K = 2000 and 2048 span blocks).
constexpr int64_t kKcPairs = 1024;
constexpr int64_t kXs2 = kKcPairs / 2 + 8;  // uint32 pairs per packed X row (padded stride)

// Lanes j of `even` and `odd` (FP32, exact in BF16) as pairs: bf16(even) low, bf16(odd) high.
inline __m512i make_pairs(__m512 even, __m512 odd) {
  return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(_mm512_castps_si512(even), 16),
                                 _mm512_castps_si512(odd));
}

// FP32 lanes with a zero exponent field (subnormals) as signed zeros.
inline __m512 daz16(__m512i b) {
  const __mmask16 sub = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7F800000));
  return _mm512_castsi512_ps(_mm512_mask_and_epi32(b, sub, b, _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// ---------------------------------------------------------------------------
// MX E4M3 codes straight to BF16 pairs (Src::Lut8, panels with panel_lut).
// A 128-entry byte table per half gives, for the code's magnitude bits, the
// BF16 bits of its value times 2^kLutU (every E4M3 magnitude, subnormals
// included, is then a BF16 normal); two rows k, k + 1 of codes (64 bytes) are
// looked up at once (VPERMI2B), the sign is or-ed into the high bytes, and one
// more byte permute per 16 columns interleaves low and high bytes of rows k and
// k + 1 into pairs. The scale is then an integer subtraction on each 16-bit
// half: (kLutU + 127 - s) << 7 off the exponent field, saturating at zero, of
// the magnitude, with the sign put back. That is exact: the exponent field of
// a nonzero value v * 2^(s - 127) is that of v * 2^kLutU minus kLutU + 127 - s,
// the mantissa unchanged; where it would be 0 or below (v * 2^(s - 127) under
// 2^-126) the result is a zero exponent field (a BF16 subnormal or zero, which
// the pair chain reads as a signed zero: the contract's DAZ) and a zero code
// stays zero. panel_lut panels have fast scales (s <= 134: so the subtrahend
// is at least (kLutU - 7) << 7 >= 0) and no NaN scales or NaN codes.
// Per 64 codes: 1 load, 4 byte permutes and 7 logic ops (3 on a
// panel_lut_plain panel, lut_scale), against 2 widening loads, 16 shift /
// mask / multiply / blend ops for the FP32 decode plus merge. At batch 1 on a
// Zen 4 core each op costs about a cycle, so the op count is the speed:
// `mxrl bench gemm --shape 1x3072x1024` went from 72 to 114 GFLOP/s with the
// plain scaling (2026-12-07, 7d09745, AMD EPYC; docs/benchmarks.md#late).
constexpr int kLutU = 119;  // 448 * 2^119 < 2^128: the largest E4M3 value stays finite

// BF16 bits of E4M3 magnitude `mag` (code & 0x7F; 0x7F, NaN, is never looked up)
// times 2^kLutU.
constexpr uint16_t lut_e4m3_bits(int mag) {
  const int e = mag >> 3, m = mag & 7;
  if (e > 0) return static_cast<uint16_t>(((e - 7 + kLutU + 127) << 7) | (m << 4));
  if (m == 0) return 0;
  const int top = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m * 2^-9 = 2^(top - 9) * (m / 2^top)
  return static_cast<uint16_t>(((top - 9 + kLutU + 127) << 7) | (((m << (3 - top)) & 7) << 4));
}

struct LutTables {
  alignas(64) uint8_t hi[128], lo[128];  // high / low byte of lut_e4m3_bits(mag)
  alignas(64) uint8_t perm[2][64];       // bytes of (L | H) for columns 0-15 / 16-31 as pairs
  constexpr LutTables() : hi(), lo(), perm() {
    for (int i = 0; i < 128; ++i) {
      hi[i] = static_cast<uint8_t>(lut_e4m3_bits(i) >> 8);
      lo[i] = static_cast<uint8_t>(lut_e4m3_bits(i) & 0xFF);
    }
    // Row k's 32 codes are bytes 0-31 (column i at 2i, 16 + i at 2i + 1), row
    // k + 1's bytes 32-63; L is permute source 0-63, H 64-127. Lane j of
    // half h: L, H of row k, then L, H of row k + 1, column 16h + j.
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 16; ++j) {
        perm[h][4 * j + 0] = static_cast<uint8_t>(2 * j + h);
        perm[h][4 * j + 1] = static_cast<uint8_t>(64 + 2 * j + h);
        perm[h][4 * j + 2] = static_cast<uint8_t>(32 + 2 * j + h);
        perm[h][4 * j + 3] = static_cast<uint8_t>(96 + 2 * j + h);
      }
  }
};
inline constexpr LutTables kLut{};

struct Lut {
  __m512i hi0, hi1, lo0, lo1, perm0, perm1;
  Lut()
      : hi0(_mm512_load_si512(kLut.hi)),
        hi1(_mm512_load_si512(kLut.hi + 64)),
        lo0(_mm512_load_si512(kLut.lo)),
        lo1(_mm512_load_si512(kLut.lo + 64)),
        perm0(_mm512_load_si512(kLut.perm[0])),
        perm1(_mm512_load_si512(kLut.perm[1])) {}
};

// The subtrahends of group g of panel p: (kLutU + 127 - s) << 7 in both
// halves of lane j, for columns j (d0) and 16 + j (d1).
inline void lut_scales(const PackedWeight& w, int64_t p, int64_t g, __m512i& d0, __m512i& d1) {
  const uint8_t* b = w.panel_mx_scales(p) + g * kPanel;
  const __m512i top = _mm512_set1_epi32(kLutU + 127);
  const __m512i t0 = _mm512_sub_epi32(top, _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))));
  const __m512i t1 =
      _mm512_sub_epi32(top, _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16))));
  d0 = _mm512_or_si512(_mm512_slli_epi32(t0, 7), _mm512_slli_epi32(t0, 23));
  d1 = _mm512_or_si512(_mm512_slli_epi32(t1, 7), _mm512_slli_epi32(t1, 23));
}

// sign | max(magnitude - d, 0) per 16-bit half. kPlain (a panel_lut_plain
// panel): one unsigned saturating subtraction of the signed half gives the
// same, because there every negative half has magnitude >= d (no -0 code,
// and the smallest nonzero magnitude, 2^-9 * 2^kLutU, has exponent field
// kLutU + 118 >= kLutU + 127 - s for s >= 9), so it never borrows from the
// sign, and a positive one saturates at +0 as it should.
template <bool kPlain>
inline __m512i lut_scale(__m512i v, __m512i d) {
  if constexpr (kPlain) return _mm512_subs_epu16(v, d);
  const __m512i sign = _mm512_set1_epi16(static_cast<short>(0x8000));
  const __m512i mag = _mm512_andnot_si512(sign, v);
  return _mm512_ternarylogic_epi32(_mm512_subs_epu16(mag, d), v, sign, 0xF8);  // a | (b & c)
}

// Rows k, k + 1 (even k) of a panel_lut panel's codes `base` as pairs: columns 0-15 (a), 16-31 (b).
template <bool kPlain>
MXRL_PAIR_LUT_TARGET inline void lut_pairs(const void* base, int64_t k, const Lut& t, __m512i d0, __m512i d1,
                                           __m512i& a, __m512i& b) {
  const __m512i c = _mm512_load_si512(static_cast<const uint8_t*>(base) + k * kPanel);
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, c, t.lo1);
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, c, t.hi1), c,
                                               _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  a = lut_scale<kPlain>(_mm512_permutex2var_epi8(lo, t.perm0, hi), d0);
  b = lut_scale<kPlain>(_mm512_permutex2var_epi8(lo, t.perm1, hi), d1);
}

// Which decode panel p takes under the source kind S chosen for the weight.
template <Src S>
inline Src panel_src(const PackedWeight& w, int64_t p) {
  if constexpr (S == Src::Lut8) return w.panel_lut(p) ? Src::Lut8 : w.panel_fast(p) ? Src::Fast20 : Src::Generic;
  if constexpr (is_fast(S)) return w.panel_fast(p) ? S : Src::Generic;
  return S;
}

// The pairs of X row r (k in [k0, k0 + kc)) into d[ceil(kc / 2)]; a missing
// last element (odd kc) is +0.
template <class Mac>
inline void x_row_pairs(const float* s, int64_t kc, uint32_t* d) {
  for (int64_t k = 0; k < kc; k += 32) {
    const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(kc - k), s + k);
    const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(kc - k - 16), s + k + 16);
    _mm512_mask_storeu_epi32(d + k / 2, lane_mask((kc - k + 1) / 2), Mac::to_bf16(lo, hi));
  }
}

// One multiply-accumulate step of 16 lanes: acc += pair(a) . pair(b), odd first.
template <class Mac>
struct PairW {
  __m512i b;
  __m512 odd, even;  // Fma only: the two halves as FP32
  explicit PairW(__m512i v) : b(v) {
    if constexpr (!Mac::kDot) {  // each half as FP32, a subnormal one as a signed zero (DAZ)
      odd = daz16(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
      even = daz16(_mm512_slli_epi32(v, 16));
    }
  }
};
template <class Mac>
inline __m512 mac(__m512 acc, __m512i a, const PairW<Mac>& w) {
  if constexpr (Mac::kDot) {
    return Mac::dot(acc, a, w.b);
  } else {
    const __m512 xo = _mm512_castsi512_ps(_mm512_and_si512(a, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    const __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
    return _mm512_fmadd_ps(xe, w.even, _mm512_fmadd_ps(xo, w.odd, acc));
  }
}

// Rows k and k + 1 (+0 where `odd` is false) of a panel as pairs: columns
// 0-15 (a), 16-31 (b). A BF16 panel row holds column i in 16-bit lane 2i and
// 16 + i in 2i + 1, so its pairs are two word blends of the raw rows, the
// same bits as widening to FP32 and merging (make_pairs) in 6 ops instead of 10.
template <Src S>
inline void load_pairs(const void* base, int64_t k, bool odd, __m512 s0, __m512 s1, const Ctx& c, __m512i& a,
                       __m512i& b) {
  if constexpr (S == Src::BF16) {
    const uint16_t* r = static_cast<const uint16_t*>(base) + k * kPanel;
    const __m512i e = _mm512_loadu_si512(r), o = odd ? _mm512_loadu_si512(r + kPanel) : _mm512_setzero_si512();
    a = _mm512_mask_blend_epi16(0xAAAAAAAAu, e, _mm512_slli_epi32(o, 16));
    b = _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(e, 16), o);
  } else {
    __m512 e0, e1, o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
    load_w<S>(base, k, s0, s1, c, e0, e1);
    if (odd) load_w<S>(base, k + 1, s0, s1, c, o0, o1);
    a = make_pairs(e0, o0);
    b = make_pairs(e1, o1);
  }
}

// Panel p, k in [k0, k1) (k0 even) as pairs [(k1 - k0 + 1) / 2][32] into out.
template <Src S>
void decode_panel_pairs(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, uint32_t* out, const Ctx& c) {
  const void* base = w.panel_data(p);
  for_groups<S>(w, k0, k1, [&](int64_t g, int64_t ka, int64_t kb) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    load_scales<S>(w, p, g, c, s0, s1);
    for (int64_t k = ka; k < kb; k += 2) {
      __m512i a, b;
      load_pairs<S>(base, k, k + 1 < kb, s0, s1, c, a, b);
      uint32_t* d = out + (k - k0) / 2 * kPanel;
      _mm512_store_si512(d, a);
      _mm512_store_si512(d + 16, b);
    }
  });
}

// decode_panel_pairs for a panel_lut panel (Src::Lut8).
template <bool kPlain>
MXRL_PAIR_LUT_TARGET inline void decode_panel_pairs_lut(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1,
                                                        uint32_t* out) {
  const void* base = w.panel_data(p);
  const Lut t;
  // (Loops, not for_groups: a lambda would not inherit the target attribute.)
  for (int64_t g = k0 / kMxBlock; g * kMxBlock < k1; ++g) {
    __m512i d0, d1;
    lut_scales(w, p, g, d0, d1);
    for (int64_t k = std::max(k0, g * kMxBlock); k < std::min(k1, (g + 1) * kMxBlock); k += 2) {
      uint32_t* d = out + (k - k0) / 2 * kPanel;
      __m512i a, b;
      lut_pairs<kPlain>(base, k, t, d0, d1, a, b);
      _mm512_store_si512(d, a);
      _mm512_store_si512(d + 16, b);
    }
  }
}

// ---------------------------------------------------------------------------
// Direct path: R rows x NP panels, all of K in registers; xq = the rows' pairs
// [R][K2].
template <class Mac, Src S, int R, int NP>
void pair_direct_kernel(const uint32_t* xq, int64_t K2, const PackedWeight& w, int64_t p, float* y, const Ctx& c) {
  const int64_t K = w.k(), N = w.n();
  __m512 acc[R][NP][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm512_setzero_ps();
  const void* base[NP];
#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) base[q] = w.panel_data(p + q);
  for_groups<S>(w, 0, K, [&](int64_t g, int64_t ka, int64_t kb) {
    __m512 s[NP][2];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) load_scales<S>(w, p + q, g, c, s[q][0], s[q][1]);
    for (int64_t k = ka; k < kb; k += 2) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        __m512i pa, pb;
        load_pairs<S>(base[q], k, k + 1 < kb, s[q][0], s[q][1], c, pa, pb);
        const PairW<Mac> w0(pa), w1(pb);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512i a = _mm512_set1_epi32(static_cast<int>(xq[r * K2 + k / 2]));
          acc[r][q][0] = mac<Mac>(acc[r][q][0], a, w0);
          acc[r][q][1] = mac<Mac>(acc[r][q][1], a, w1);
        }
      }
    }
  });
#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) {
    const int64_t cols = N - (p + q) * kPanel;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      store_row(y + r * N + (p + q) * kPanel, acc[r][q][0], acc[r][q][1], lane_mask(cols), lane_mask(cols - 16), true);
  }
}

// pair_direct_kernel for the NP panel_lut panels ps[0 .. NP) (any panels:
// each has its own outputs); kPlain: all of them are panel_lut_plain.
template <class Mac, int R, int NP, bool kPlain>
MXRL_PAIR_LUT_TARGET void pair_direct_lut(const uint32_t* xq, int64_t K2, const PackedWeight& w, const int64_t* ps,
                                          float* y) {
  const int64_t K = w.k(), N = w.n();
  __m512 acc[R][NP][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm512_setzero_ps();
  const Lut t;
  for (int64_t g = 0; g < K / kMxBlock; ++g) {
    __m512i d[NP][2];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) lut_scales(w, ps[q], g, d[q][0], d[q][1]);
    for (int64_t k = g * kMxBlock; k < (g + 1) * kMxBlock; k += 2) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        __m512i a, b;
        lut_pairs<kPlain>(w.panel_data(ps[q]), k, t, d[q][0], d[q][1], a, b);
        const PairW<Mac> w0(a), w1(b);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512i x2 = _mm512_set1_epi32(static_cast<int>(xq[r * K2 + k / 2]));
          acc[r][q][0] = mac<Mac>(acc[r][q][0], x2, w0);
          acc[r][q][1] = mac<Mac>(acc[r][q][1], x2, w1);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) {
    const int64_t cols = N - ps[q] * kPanel;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
      store_row(y + r * N + ps[q] * kPanel, acc[r][q][0], acc[r][q][1], lane_mask(cols), lane_mask(cols - 16), true);
  }
}

// pair_direct_rows for Src::Lut8: the table panels gathered by scaling
// (plain or not) and run kNp at a time, the rest (Fast20, Generic) one by
// one. The order does not matter: every panel has its own outputs.
template <class Mac, int R, int kNp>
void pair_direct_rows_lut(const uint32_t* xq, int64_t K2, const PackedWeight& w, int64_t p0, int64_t p1, float* y,
                          const Ctx& c) {
  int64_t group[2][kNp];  // [plain][..]
  int n[2] = {0, 0};
  for (int64_t p = p0; p < p1; ++p) {
    const Src src = panel_src<Src::Lut8>(w, p);
    if (src != Src::Lut8) {
      if (src == Src::Fast20)
        pair_direct_kernel<Mac, Src::Fast20, R, 1>(xq, K2, w, p, y, c);
      else
        pair_direct_kernel<Mac, Src::Generic, R, 1>(xq, K2, w, p, y, c);
      continue;
    }
    const int plain = w.panel_lut_plain(p) ? 1 : 0;
    group[plain][n[plain]++] = p;
    if (n[plain] < kNp) continue;
    if (plain)
      pair_direct_lut<Mac, R, kNp, true>(xq, K2, w, group[1], y);
    else
      pair_direct_lut<Mac, R, kNp, false>(xq, K2, w, group[0], y);
    n[plain] = 0;
  }
  for (int i = 0; i < n[1]; ++i) pair_direct_lut<Mac, R, 1, true>(xq, K2, w, &group[1][i], y);
  for (int i = 0; i < n[0]; ++i) pair_direct_lut<Mac, R, 1, false>(xq, K2, w, &group[0][i], y);
}

template <class Mac, Src S, int R>
void pair_direct_rows(const uint32_t* xq, int64_t K2, const PackedWeight& w, int64_t p0, int64_t p1, float* y,
                      const Ctx& c) {
  constexpr int kNp = R == 1 ? 4 : R <= 3 ? 2 : 1;  // >= 8 independent chains
  if constexpr (S == Src::Lut8) {
    pair_direct_rows_lut<Mac, R, kNp>(xq, K2, w, p0, p1, y, c);
  } else {
    for (int64_t p = p0; p < p1;) {
      if constexpr (kNp > 1) {
        bool same = p + kNp <= p1;
        for (int q = 0; q < kNp && same; ++q) same = panel_src<S>(w, p + q) == S;
        if (same) {
          pair_direct_kernel<Mac, S, R, kNp>(xq, K2, w, p, y, c);
          p += kNp;
          continue;
        }
      }
      if (panel_src<S>(w, p) == Src::Generic)
        pair_direct_kernel<Mac, Src::Generic, R, 1>(xq, K2, w, p, y, c);
      else
        pair_direct_kernel<Mac, S, R, 1>(xq, K2, w, p, y, c);
      ++p;
    }
  }
}

// ---------------------------------------------------------------------------
// Blocked path: X pairs packed per tile of kMr rows at stride kXs2, one panel
// slice decoded to pairs and reused by every tile. A tile's three steps:
// start its R x 32 sums (zero on the first K block, else from Y) ...
template <int R>
inline void tile_start(__m512 (&acc)[R][2], const float* y, int64_t ldy, __mmask16 m0, __mmask16 m1, bool first) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + r * ldy);
    acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);
  }
}
// ... add pair row i of X times the panel's pairs a (columns 0-15), b (16-31) ...
template <class Mac, int R>
inline void tile_step(__m512 (&acc)[R][2], const uint32_t* xp, int64_t i, __m512i a, __m512i b) {
  const PairW<Mac> b0(a), b1(b);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512i x2 = _mm512_set1_epi32(static_cast<int>(xp[r * kXs2 + i]));
    acc[r][0] = mac<Mac>(acc[r][0], x2, b0);
    acc[r][1] = mac<Mac>(acc[r][1], x2, b1);
  }
}
// (A panel's first tile also keeps each decoded pair row in wb for the others.)
template <class Mac, int R>
inline void tile_keep_step(__m512 (&acc)[R][2], const uint32_t* xp, uint32_t* wb, int64_t i, __m512i a, __m512i b) {
  _mm512_store_si512(wb + i * kPanel, a);
  _mm512_store_si512(wb + i * kPanel + 16, b);
  tile_step<Mac, R>(acc, xp, i, a, b);
}
// ... and store them. Meanwhile a tile prefetches its share of the next
// panel's slice into L2, a line or two per pair row (Ahead::at), for the next
// panel's first tile. (Issued in one burst before each tile instead, they did
// not arrive in time: on a Zen 4 EPYC the 0.6B head at M = 32 ran at 0.77-0.82x
// oneDNN's BF16 matmul, 1.11x spread out, and batch-32 decode 15-20% slower.)
struct Ahead {
  const char* p = nullptr;  // the tile's first line of the next panel's slice
  int64_t lines = 0;        // <= 2 kp
  void at(int64_t i, int64_t kp) const {
    if (i < lines) _mm_prefetch(p + i * 64, _MM_HINT_T1);
    if (i + kp < lines) _mm_prefetch(p + (i + kp) * 64, _MM_HINT_T1);
  }
};
template <int R>
inline void tile_end(const __m512 (&acc)[R][2], float* y, int64_t ldy, __mmask16 m0, __mmask16 m1, bool last) {
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store_row(y + r * ldy, acc[r][0], acc[r][1], m0, m1, last);
}

// R rows over kp decoded pair rows b[kp][32].
template <class Mac, int R>
void pair_tile(int64_t kp, const uint32_t* xp, const uint32_t* b, float* y, int64_t ldy, __mmask16 m0, __mmask16 m1,
               bool first, bool last, Ahead pf) {
  __m512 acc[R][2];
  tile_start<R>(acc, y, ldy, m0, m1, first);
  for (int64_t i = 0; i < kp; ++i) {
    pf.at(i, kp);
    tile_step<Mac, R>(acc, xp, i, _mm512_load_si512(b + i * kPanel), _mm512_load_si512(b + i * kPanel + 16));
  }
  tile_end<R>(acc, y, ldy, m0, m1, last);
}

// The first (full) tile of a panel, decoding the panel slice k in [k0, k1) as
// it goes: each pair row is decoded as decode_panel_pairs (BF16) or
// decode_panel_pairs_lut (MX E4M3, a panel_lut panel) would, stored to wb for
// the panel's other tiles and used at once. The decode's loads, shifts,
// blends and permutes then issue beside the tile's dot products instead of in
// a pass of their own: same pairs, same chains, same bits. (Two functions:
// the lookup needs VBMI, which a BF16 weight must not require.)
template <class Mac>
void pair_tile_bf16(const void* base, int64_t k0, int64_t k1, const uint32_t* xp, uint32_t* wb, float* y, int64_t ldy,
                    __mmask16 m0, __mmask16 m1, bool first, bool last, Ahead pf, const Ctx& c) {
  __m512 acc[kMr][2];
  tile_start<kMr>(acc, y, ldy, m0, m1, first);
  for (int64_t k = k0; k < k1; k += 2) {
    pf.at((k - k0) / 2, (k1 - k0 + 1) / 2);
    __m512i a, b;
    load_pairs<Src::BF16>(base, k, k + 1 < k1, _mm512_setzero_ps(), _mm512_setzero_ps(), c, a, b);
    tile_keep_step<Mac, kMr>(acc, xp, wb, (k - k0) / 2, a, b);
  }
  tile_end<kMr>(acc, y, ldy, m0, m1, last);
}
template <class Mac, bool kPlain>
MXRL_PAIR_LUT_TARGET void pair_tile_lut(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, const uint32_t* xp,
                                        uint32_t* wb, float* y, int64_t ldy, __mmask16 m0, __mmask16 m1, bool first,
                                        bool last, Ahead pf) {
  const void* base = w.panel_data(p);
  const Lut t;
  __m512 acc[kMr][2];
  tile_start<kMr>(acc, y, ldy, m0, m1, first);
  for (int64_t g = k0 / kMxBlock; g < k1 / kMxBlock; ++g) {  // k0, k1: multiples of 32 (MX)
    __m512i d0, d1;
    lut_scales(w, p, g, d0, d1);
    for (int64_t k = g * kMxBlock; k < (g + 1) * kMxBlock; k += 2) {
      pf.at((k - k0) / 2, (k1 - k0) / 2);
      __m512i a, b;
      lut_pairs<kPlain>(base, k, t, d0, d1, a, b);
      tile_keep_step<Mac, kMr>(acc, xp, wb, (k - k0) / 2, a, b);
    }
  }
  tile_end<kMr>(acc, y, ldy, m0, m1, last);
}

template <class Mac>
using PairTileFn = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, __mmask16, __mmask16, bool,
                            bool, Ahead);
template <class Mac, int... R>
constexpr std::array<PairTileFn<Mac>, sizeof...(R)> pair_tile_table(std::integer_sequence<int, R...>) {
  return {pair_tile<Mac, R + 1>...};
}

// Per-thread buffers: X pairs and one decoded panel slice (kernels/gemm/aligned_scratch.h).
struct PairScratch {
  AlignedScratch<uint32_t> x;
  AlignedScratch<uint32_t> wb{kKcPairs / 2 * kPanel};
};

template <class Mac, Src S>
void pair_run_src(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                  const Ctx& c, PairScratch& scratch) {
  static constexpr auto kTilesP = pair_tile_table<Mac>(std::make_integer_sequence<int, kMr>{});
  const int64_t K = w.k(), N = w.n(), rows = m1 - m0;
  if (rows <= kDirectRows) {
    const int64_t K2 = (K + 1) / 2;
    uint32_t* xq = scratch.x.get(static_cast<size_t>(rows * K2));
    for (int64_t r = 0; r < rows; ++r) x_row_pairs<Mac>(x + (m0 + r) * K, K, xq + r * K2);
    float* yr = y + m0 * N;
    switch (rows) {
      case 1: return pair_direct_rows<Mac, S, 1>(xq, K2, w, p0, p1, yr, c);
      case 2: return pair_direct_rows<Mac, S, 2>(xq, K2, w, p0, p1, yr, c);
      case 3: return pair_direct_rows<Mac, S, 3>(xq, K2, w, p0, p1, yr, c);
      case 4: return pair_direct_rows<Mac, S, 4>(xq, K2, w, p0, p1, yr, c);
      case 5: return pair_direct_rows<Mac, S, 5>(xq, K2, w, p0, p1, yr, c);
      case 6: return pair_direct_rows<Mac, S, 6>(xq, K2, w, p0, p1, yr, c);
      default: return;
    }
  }
  const int64_t esize = S == Src::BF16 ? 2 : 1;
  const int64_t tiles = (rows + kMr - 1) / kMr;
  uint32_t* xp = scratch.x.get(static_cast<size_t>(tiles * kMr * kXs2));
  uint32_t* const wb = scratch.wb.data();
  for (int64_t k0 = 0; k0 < K; k0 += kKcPairs) {
    const int64_t k1 = std::min(K, k0 + kKcPairs), kc = k1 - k0, kp = (kc + 1) / 2;
    for (int64_t r = 0; r < rows; ++r) x_row_pairs<Mac>(x + (m0 + r) * K + k0, kc, xp + r * kXs2);
    for (int64_t p = p0; p < p1; ++p) {
      // A full first tile decodes BF16 and panel_lut panels itself (pair_tile_bf16, pair_tile_lut).
      const bool fused = rows >= kMr && (S == Src::BF16 || (S == Src::Lut8 && panel_src<S>(w, p) == Src::Lut8));
      if (!fused) switch (panel_src<S>(w, p)) {
        case Src::Generic: decode_panel_pairs<Src::Generic>(w, p, k0, k1, wb, c); break;
        case Src::Fast20:
          if constexpr (S == Src::Lut8) {
            decode_panel_pairs<Src::Fast20>(w, p, k0, k1, wb, c);
            break;
          }
          [[fallthrough]];
        default:
          if constexpr (S == Src::Lut8) {
            if (w.panel_lut_plain(p))
              decode_panel_pairs_lut<true>(w, p, k0, k1, wb);
            else
              decode_panel_pairs_lut<false>(w, p, k0, k1, wb);
          } else
            decode_panel_pairs<S>(w, p, k0, k1, wb, c);
      }
      const int64_t cols = N - p * kPanel;
      const __mmask16 mk0 = lane_mask(cols), mk1 = lane_mask(cols - 16);
      const char* next = p + 1 < p1 ? static_cast<const char*>(w.panel_data(p + 1)) + k0 * kPanel * esize : nullptr;
      const int64_t lines = kc * kPanel * esize / 64, per_tile = (lines + tiles - 1) / tiles;
      for (int64_t t = 0; t < tiles; ++t) {
        const int r = static_cast<int>(std::min<int64_t>(kMr, rows - t * kMr));
        Ahead pf;
        if (next) pf = {next + t * per_tile * 64, std::max<int64_t>(0, std::min(lines, (t + 1) * per_tile) - t * per_tile)};
        float* yt = y + (m0 + t * kMr) * N + p * kPanel;
        if (fused && t == 0) {
          if constexpr (S == Src::Lut8) {
            if (w.panel_lut_plain(p))
              pair_tile_lut<Mac, true>(w, p, k0, k1, xp, wb, yt, N, mk0, mk1, k0 == 0, k1 == K, pf);
            else
              pair_tile_lut<Mac, false>(w, p, k0, k1, xp, wb, yt, N, mk0, mk1, k0 == 0, k1 == K, pf);
          } else
            pair_tile_bf16<Mac>(w.panel_data(p), k0, k1, xp, wb, yt, N, mk0, mk1, k0 == 0, k1 == K, pf, c);
          continue;
        }
        kTilesP[r - 1](kp, xp + t * kMr * kXs2, wb, yt, N, mk0, mk1, k0 == 0, k1 == K, pf);
      }
    }
  }
}

// Rows [m0, m1) x panels [p0, p1) of a BF16 or MX weight under the pair contract.
template <class Mac>
void pair_run(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  static thread_local PairScratch scratch;
  const Ctx c(w);
  if (w.format() == WFormat::BF16) return pair_run_src<Mac, Src::BF16>(x, w, y, m0, m1, p0, p1, c, scratch);
  if (w.elem() == ElemType::E4M3)
    return pair_lut_enabled() ? pair_run_src<Mac, Src::Lut8>(x, w, y, m0, m1, p0, p1, c, scratch)
                              : pair_run_src<Mac, Src::Fast20>(x, w, y, m0, m1, p0, p1, c, scratch);
  if (w.elem() == ElemType::E5M2) return pair_run_src<Mac, Src::Fast21>(x, w, y, m0, m1, p0, p1, c, scratch);
  return pair_run_src<Mac, Src::Generic>(x, w, y, m0, m1, p0, p1, c, scratch);
}

}  // namespace
}  // namespace mxrl::detail
