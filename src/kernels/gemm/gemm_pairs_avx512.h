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

constexpr int64_t kXs2 = kKc / 2 + 8;  // uint32 pairs per packed X row (padded stride)
constexpr int64_t kGroupBytes = 256 << 10;  // blocked path: Y partial sums per panel group

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

// Panel p, k in [k0, k1) (k0 even) as pairs [(k1 - k0 + 1) / 2][32] into out.
template <Src S>
void decode_panel_pairs(const PackedWeight& w, int64_t p, int64_t k0, int64_t k1, uint32_t* out, const Ctx& c) {
  const void* base = w.panel_data(p);
  for_groups<S>(w, k0, k1, [&](int64_t g, int64_t ka, int64_t kb) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    load_scales<S>(w, p, g, c, s0, s1);
    for (int64_t k = ka; k < kb; k += 2) {
      __m512 e0, e1, o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
      load_w<S>(base, k, s0, s1, c, e0, e1);
      if (k + 1 < kb) load_w<S>(base, k + 1, s0, s1, c, o0, o1);
      uint32_t* d = out + (k - k0) / 2 * kPanel;
      _mm512_store_si512(d, make_pairs(e0, o0));
      _mm512_store_si512(d + 16, make_pairs(e1, o1));
    }
  });
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
        __m512 e0, e1, o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
        load_w<S>(base[q], k, s[q][0], s[q][1], c, e0, e1);
        if (k + 1 < kb) load_w<S>(base[q], k + 1, s[q][0], s[q][1], c, o0, o1);
        const PairW<Mac> w0(make_pairs(e0, o0)), w1(make_pairs(e1, o1));
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

template <class Mac, Src S, int R>
void pair_direct_rows(const uint32_t* xq, int64_t K2, const PackedWeight& w, int64_t p0, int64_t p1, float* y,
                      const Ctx& c) {
  constexpr int kNp = R == 1 ? 4 : R <= 3 ? 2 : 1;  // >= 8 independent chains
  for (int64_t p = p0; p < p1;) {
    if constexpr (kNp > 1) {
      bool fast = p + kNp <= p1;
      if constexpr (is_fast(S))
        for (int q = 0; q < kNp && fast; ++q) fast = w.panel_fast(p + q);
      if (fast) {
        pair_direct_kernel<Mac, S, R, kNp>(xq, K2, w, p, y, c);
        p += kNp;
        continue;
      }
    }
    if (is_fast(S) && !w.panel_fast(p))
      pair_direct_kernel<Mac, Src::Generic, R, 1>(xq, K2, w, p, y, c);
    else
      pair_direct_kernel<Mac, S, R, 1>(xq, K2, w, p, y, c);
    ++p;
  }
}

// ---------------------------------------------------------------------------
// Blocked path: X pairs packed per tile of kMr rows at stride kXs2, one panel
// slice decoded to pairs and reused by every tile.
template <class Mac, int R>
void pair_tile(int64_t kp, const uint32_t* xp, const uint32_t* b, float* y, int64_t ldy, __mmask16 m0, __mmask16 m1,
               bool first, bool last) {
  __m512 acc[R][2];
  if (first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, y + r * ldy);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);
    }
  }
  for (int64_t i = 0; i < kp; ++i) {
    const PairW<Mac> b0(_mm512_load_si512(b + i * kPanel)), b1(_mm512_load_si512(b + i * kPanel + 16));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(xp[r * kXs2 + i]));
      acc[r][0] = mac<Mac>(acc[r][0], a, b0);
      acc[r][1] = mac<Mac>(acc[r][1], a, b1);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store_row(y + r * ldy, acc[r][0], acc[r][1], m0, m1, last);
}

template <class Mac>
using PairTileFn = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, __mmask16, __mmask16, bool,
                            bool);
template <class Mac, int... R>
constexpr std::array<PairTileFn<Mac>, sizeof...(R)> pair_tile_table(std::integer_sequence<int, R...>) {
  return {pair_tile<Mac, R + 1>...};
}

// Per-thread buffers: X pairs and one decoded panel slice (kernels/gemm/aligned_scratch.h).
struct PairScratch {
  AlignedScratch<uint32_t> x;
  AlignedScratch<uint32_t> wb{kKc / 2 * kPanel};
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
  // Panels in groups whose partial sums (rows x 32 FP32 per panel) stay in L2
  // between K blocks: with every panel of a wide weight in one sweep per K
  // block (the LM head: 151936 columns), each block reloaded them from memory.
  // Per output the K blocks still run in order, each continuing the exact
  // partial sum the previous one left in Y: the same chain.
  const int64_t group = std::max<int64_t>(1, kGroupBytes / (rows * kPanel * int64_t(sizeof(float))));
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t k1 = std::min(K, k0 + kKc), kc = k1 - k0, kp = (kc + 1) / 2;
      for (int64_t r = 0; r < rows; ++r) x_row_pairs<Mac>(x + (m0 + r) * K + k0, kc, xp + r * kXs2);
      for (int64_t p = g0; p < g1; ++p) {
        if (is_fast(S) && !w.panel_fast(p))
          decode_panel_pairs<Src::Generic>(w, p, k0, k1, wb, c);
        else
          decode_panel_pairs<S>(w, p, k0, k1, wb, c);
        const int64_t cols = N - p * kPanel;
        const __mmask16 mk0 = lane_mask(cols), mk1 = lane_mask(cols - 16);
        // The slice decoded next: the next panel of the group, else the group's
        // first in the next K block, else the next group's first.
        const int64_t np = p + 1 < g1 ? p + 1 : k1 < K ? g0 : g1 < p1 ? g1 : -1;
        const int64_t nk = p + 1 < g1 ? k0 : k1 < K ? k1 : 0;
        const int64_t nkc = std::min(K, nk + kKc) - nk;
        const char* next = np >= 0 ? static_cast<const char*>(w.panel_data(np)) + nk * kPanel * esize : nullptr;
        const int64_t lines = nkc * kPanel * esize / 64, per_tile = (lines + tiles - 1) / tiles;
        for (int64_t t = 0; t < tiles; ++t) {
          const int r = static_cast<int>(std::min<int64_t>(kMr, rows - t * kMr));
          if (next)
            for (int64_t l = t * per_tile; l < std::min(lines, (t + 1) * per_tile); ++l)
              _mm_prefetch(next + l * 64, _MM_HINT_T1);
          kTilesP[r - 1](kp, xp + t * kMr * kXs2, wb, y + (m0 + t * kMr) * N + p * kPanel, N, mk0, mk1, k0 == 0,
                         k1 == K);
        }
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
  if (w.elem() == ElemType::E4M3) return pair_run_src<Mac, Src::Fast20>(x, w, y, m0, m1, p0, p1, c, scratch);
  if (w.elem() == ElemType::E5M2) return pair_run_src<Mac, Src::Fast21>(x, w, y, m0, m1, p0, p1, c, scratch);
  return pair_run_src<Mac, Src::Generic>(x, w, y, m0, m1, p0, p1, c, scratch);
}

}  // namespace
}  // namespace mxrl::detail
