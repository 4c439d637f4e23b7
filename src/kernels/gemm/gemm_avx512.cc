// AVX-512 GEMM backend: broadcast-FMA register tiles over K-major 32-column
// panels. Every output lane runs y = fma(x[m][k], w[n][k], y) for k in order,
// exactly as the scalar reference (gemm_test.cc checks it bit for bit):
//   - few rows (decode-bound, M = 1 sampling): the weights are widened or
//     decoded on the fly, several panels at once so that enough independent
//     FMA chains are in flight;
//   - more rows (up to kMc per call): K is cut into cache blocks of kKc; for
//     each block the rows of X are copied to a fixed stride, each panel slice
//     is decoded once into an FP32 scratch buffer and reused by every 12 x 32
//     register tile. A block continues from the exact FP32 partial sums the
//     previous one left in Y, so the order of the FMAs over K is unchanged.
// Threads (gemm.cc) split row blocks and panels, never K.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include <cmath>

#include "kernels/gemm/aligned_scratch.h"
#include "kernels/gemm/gemm.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "numerics/simd_avx512.h"

#include "kernels/gemm/gemm_avx512_common.h"

namespace mxrl::detail {
namespace {
struct FmaMac {
  static constexpr bool kDot = false;
  // 32 FP32 to 32 BF16 (RNE, DAZ) in order, as VCVTNE2PS2BF16.
  static __m512i to_bf16(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_rne_daz16(lo))),
                              _mm512_cvtepi32_epi16(bf16_rne_daz16(hi)), 1);
  }
  static __m512 dot(__m512 acc, __m512i, __m512i) { return acc; }  // unused: kDot is false
};
}  // namespace
}  // namespace mxrl::detail

#define MXRL_PAIR_LUT_TARGET MXRL_TARGET_AVX512_VBMI
#include "kernels/gemm/gemm_pairs_avx512.h"

namespace mxrl::detail {
namespace {
// ---------------------------------------------------------------------------
// Direct path: R rows x NP consecutive panels, all of K in registers.
template <Src S, int R, int NP>
void direct_kernel(const float* x, const PackedWeight& w, int64_t p, float* y, const Ctx& c) {
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
    for (int64_t k = ka; k < kb; ++k) {
#pragma GCC unroll 8
      for (int q = 0; q < NP; ++q) {
        __m512 w0, w1;
        load_w<S>(base[q], k, s[q][0], s[q][1], c, w0, w1);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 xb = _mm512_set1_ps(x[r * K + k]);
          acc[r][q][0] = _mm512_fmadd_ps(xb, w0, acc[r][q][0]);
          acc[r][q][1] = _mm512_fmadd_ps(xb, w1, acc[r][q][1]);
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

template <Src S, int R>
void direct_rows(const float* x, const PackedWeight& w, int64_t p0, int64_t p1, float* y, const Ctx& c) {
  constexpr int kNp = R == 1 ? 4 : R <= 3 ? 2 : 1;  // >= 8 independent FMA chains
  for (int64_t p = p0; p < p1;) {
    if constexpr (kNp > 1) {
      bool fast = p + kNp <= p1;
      if constexpr (is_fast(S))
        for (int q = 0; q < kNp && fast; ++q) fast = w.panel_fast(p + q);
      if (fast) {
        direct_kernel<S, R, kNp>(x, w, p, y, c);
        p += kNp;
        continue;
      }
    }
    if (is_fast(S) && !w.panel_fast(p))
      direct_kernel<Src::Generic, R, 1>(x, w, p, y, c);
    else
      direct_kernel<S, R, 1>(x, w, p, y, c);
    ++p;
  }
}

template <Src S>
void direct(const float* x, const PackedWeight& w, int64_t rows, int64_t p0, int64_t p1, float* y, const Ctx& c) {
  switch (rows) {
    case 1: return direct_rows<S, 1>(x, w, p0, p1, y, c);
    case 2: return direct_rows<S, 2>(x, w, p0, p1, y, c);
    case 3: return direct_rows<S, 3>(x, w, p0, p1, y, c);
    case 4: return direct_rows<S, 4>(x, w, p0, p1, y, c);
    case 5: return direct_rows<S, 5>(x, w, p0, p1, y, c);
    case 6: return direct_rows<S, 6>(x, w, p0, p1, y, c);
    default: break;
  }
  static_assert(kDirectRows == 6);
}

// ---------------------------------------------------------------------------
// Blocked path.

// Rows [m0, m0 + rows) x k in [k0, k0 + kc) of X into xp: per tile of kMr
// rows, each row at a fixed stride of kXs floats (a compile-time stride lets
// the kernel address every row from one register; the padding avoids 4 KiB
// aliasing between rows). The last tile may have fewer rows (its kernel reads
// only those).
constexpr int64_t kXs = kKc + 16;
void pack_x(const float* x, int64_t K, int64_t m0, int64_t rows, int64_t k0, int64_t kc, float* xp) {
  for (int64_t t = 0; t * kMr < rows; ++t) {
    float* d = xp + t * kMr * kXs;
    const int r = static_cast<int>(std::min<int64_t>(kMr, rows - t * kMr));
    for (int i = 0; i < r; ++i) {
      const float* s = x + (m0 + t * kMr + i) * K + k0;
      for (int64_t k = 0; k < kc; k += 16) {
        const __mmask16 m = lane_mask(kc - k);
        _mm512_mask_storeu_ps(d + i * kXs + k, m, _mm512_maskz_loadu_ps(m, s + k));
      }
    }
  }
}

template <int R>
void tile_kernel(int64_t kc, const float* xp, const float* b, float* y, int64_t ldy, __mmask16 m0, __mmask16 m1,
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
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kPanel), b1 = _mm512_load_ps(b + k * kPanel + 16);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(xp[r * kXs + k]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) store_row(y + r * ldy, acc[r][0], acc[r][1], m0, m1, last);
}

using TileFn = void (*)(int64_t, const float*, const float*, float*, int64_t, __mmask16, __mmask16, bool, bool);
template <int... R>
constexpr std::array<TileFn, sizeof...(R)> tile_table(std::integer_sequence<int, R...>) {
  return {tile_kernel<R + 1>...};
}
constexpr auto kTiles = tile_table(std::make_integer_sequence<int, kMr>{});

// Per-thread buffers of the blocked path: packed X rows and one decoded panel slice.
struct Scratch {
  AlignedScratch<float> x;
  AlignedScratch<float> wb{kKc * kPanel};
};
Scratch& thread_scratch() {
  static thread_local Scratch s;
  return s;
}

template <Src S>
void blocked(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
             const Ctx& c) {
  Scratch& scratch = thread_scratch();
  const int64_t esize = S == Src::F32 ? 4 : S == Src::BF16 ? 2 : 1;  // bytes per packed element
  const int64_t K = w.k(), N = w.n(), rows = m1 - m0, tiles = (rows + kMr - 1) / kMr;
  float* xp = scratch.x.get(static_cast<size_t>(tiles * kMr * kXs));
  float* const wb = scratch.wb.data();
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t k1 = std::min(K, k0 + kKc), kc = k1 - k0;
    pack_x(x, K, m0, rows, k0, kc, xp);
    for (int64_t p = p0; p < p1; ++p) {
      const float* b;
      if constexpr (S == Src::F32) {
        b = static_cast<const float*>(w.panel_data(p)) + k0 * kPanel;
      } else if constexpr (is_fast(S)) {
        if (w.panel_fast(p))
          decode_panel<S>(w, p, k0, k1, wb, c);
        else
          decode_panel<Src::Generic>(w, p, k0, k1, wb, c);
        b = wb;
      } else {
        decode_panel<S>(w, p, k0, k1, wb, c);
        b = wb;
      }
      const int64_t cols = N - p * kPanel;
      const __mmask16 mk0 = lane_mask(cols), mk1 = lane_mask(cols - 16);
      // While the tiles run, bring in the next panel's slice (to L2, spread over
      // the tiles) and the next tile's partial sums.
      const char* next = p + 1 < p1 ? static_cast<const char*>(w.panel_data(p + 1)) + k0 * kPanel * esize : nullptr;
      const int64_t lines = kc * kPanel * esize / 64, per_tile = (lines + tiles - 1) / tiles;
      for (int64_t t = 0; t < tiles; ++t) {
        const int r = static_cast<int>(std::min<int64_t>(kMr, rows - t * kMr));
        if (next)
          for (int64_t l = t * per_tile; l < std::min(lines, (t + 1) * per_tile); ++l)
            _mm_prefetch(next + l * 64, _MM_HINT_T1);
        if (k0 > 0 && t + 1 < tiles) {
          const float* yn = y + (m0 + (t + 1) * kMr) * N + p * kPanel;
          for (int i = 0; i < std::min<int64_t>(kMr, rows - (t + 1) * kMr); ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(yn + i * N), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(yn + i * N + 16), _MM_HINT_T0);
          }
        }
        kTiles[r - 1](kc, xp + t * kMr * kXs, b, y + (m0 + t * kMr) * N + p * kPanel, N, mk0, mk1, k0 == 0, k1 == K);
      }
    }
  }
}

template <Src S>
void run_src(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
             const Ctx& c) {
  if (m1 - m0 <= kDirectRows)
    direct<S>(x + m0 * w.k(), w, m1 - m0, p0, p1, y + m0 * w.n(), c);
  else
    blocked<S>(x, w, y, m0, m1, p0, p1, c);
}

void run(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  if (pair_contract(w.format())) {
    // Two FMAs per pair under MXCSR FTZ (results flushed as VDPBF16PS does);
    // the operands' DAZ is explicit (the weight decode must see subnormals).
    struct FlushToZero {
      unsigned csr = _mm_getcsr();
      FlushToZero() { _mm_setcsr(csr | 0x8000u); }
      ~FlushToZero() { _mm_setcsr(csr); }
    } ftz;
    return pair_run<FmaMac>(x, w, y, m0, m1, p0, p1);
  }
  const Ctx c(w);
  switch (w.format()) {
    case WFormat::F32: return run_src<Src::F32>(x, w, y, m0, m1, p0, p1, c);
    case WFormat::BF16: return run_src<Src::BF16>(x, w, y, m0, m1, p0, p1, c);
    case WFormat::MX:
    case WFormat::FP8:
      // The fast kinds fall back to Generic per panel (NaN/Inf codes, unfoldable scales);
      // FP6/FP4 panels are never fast.
      if (w.elem() == ElemType::E4M3) return run_src<Src::Fast20>(x, w, y, m0, m1, p0, p1, c);
      if (w.elem() == ElemType::E5M2) return run_src<Src::Fast21>(x, w, y, m0, m1, p0, p1, c);
      return run_src<Src::Generic>(x, w, y, m0, m1, p0, p1, c);
  }
}

// The pair chain on VDPBF16PS (PairKernel::Dot); the other formats as run.
void run_dot(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  if (pair_contract(w.format())) return gemm_pairs_dot(x, w, y, m0, m1, p0, p1);
  run(x, w, y, m0, m1, p0, p1);
}
}  // namespace

const GemmKernels kGemmAvx512 = {run, kMc, kMr};
const GemmKernels kGemmAvx512Dot = {run_dot, kMc, kMr};

}  // namespace mxrl::detail
MXRL_END_AVX512
