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
#include <cstdlib>
#include <new>
#include <utility>

#include <cmath>

#include "kernels/gemm.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "numerics/simd_avx512.h"

namespace mxrl::detail {
namespace {
constexpr int kPanel = PackedWeight::kPanel;
constexpr int kMr = 12;          // rows of a register tile (blocked path): 24 accumulators
constexpr int64_t kMc = 192;     // rows per block handed to run(); a multiple of kMr
constexpr int64_t kKc = 256;     // K per cache block (scratch slice 32 KiB)
constexpr int kDirectRows = 6;   // up to this many rows: decode on the fly

// How a panel's weights become FP32. Fast20 / Fast21: E4M3 / E5M2 codes of a
// fast panel (the shift 23 - mbits as an immediate); Generic: exact decode.
enum class Src { F32, BF16, Fast20, Fast21, Generic };
constexpr bool is_fast(Src s) { return s == Src::Fast20 || s == Src::Fast21; }
constexpr int fast_shift(Src s) { return s == Src::Fast20 ? 20 : 21; }

struct Ctx {
  WFormat fmt;
  __m512i magsign;  // sign bit and the magnitude bits after the shift (fast)
  __m512i fold;     // 127 - bias, added to E8M0 bytes (fast, MX)
  simd::Elem elem;  // Generic: exact decode
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
      s0 = simd::e8m0_to_f32_16(b0);
      s1 = simd::e8m0_to_f32_16(b1);
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
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(base) + k * kPanel));
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
      w0 = _mm512_mul_ps(simd::decode16(c0, c.elem), s0);
      w1 = _mm512_mul_ps(simd::decode16(c1, c.elem), s1);
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
      store_row(y + r * N + (p + q) * kPanel, acc[r][q][0], acc[r][q][1], lane_mask(cols), lane_mask(cols - 16),
                true);
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

// Per-thread buffers of the blocked path: packed X rows and one decoded panel
// slice. (No std::vector here: its inline members compiled with AVX-512 flags
// could be picked by the linker for the scalar build's callers.)
struct Scratch {
  float* xp = nullptr;
  size_t xp_floats = 0;
  float* wb = static_cast<float*>(std::aligned_alloc(64, kKc * kPanel * sizeof(float)));
  Scratch() {
    if (!wb) throw std::bad_alloc();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::free(xp);
    std::free(wb);
  }
  float* x_buffer(size_t floats) {
    if (floats > xp_floats) {
      std::free(xp);
      xp_floats = (floats + 15) / 16 * 16;
      xp = static_cast<float*>(std::aligned_alloc(64, xp_floats * sizeof(float)));
      if (!xp) {
        xp_floats = 0;
        throw std::bad_alloc();
      }
    }
    return xp;
  }
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
  float* xp = scratch.x_buffer(static_cast<size_t>(tiles * kMr * kXs));
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t k1 = std::min(K, k0 + kKc), kc = k1 - k0;
    pack_x(x, K, m0, rows, k0, kc, xp);
    for (int64_t p = p0; p < p1; ++p) {
      const float* b;
      if constexpr (S == Src::F32) {
        b = static_cast<const float*>(w.panel_data(p)) + k0 * kPanel;
      } else if constexpr (is_fast(S)) {
        if (w.panel_fast(p))
          decode_panel<S>(w, p, k0, k1, scratch.wb, c);
        else
          decode_panel<Src::Generic>(w, p, k0, k1, scratch.wb, c);
        b = scratch.wb;
      } else {
        decode_panel<S>(w, p, k0, k1, scratch.wb, c);
        b = scratch.wb;
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
        kTiles[r - 1](kc, xp + t * kMr * kXs, b, y + (m0 + t * kMr) * N + p * kPanel, N, mk0, mk1, k0 == 0,
                      k1 == K);
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
}  // namespace

const GemmKernels kGemmAvx512 = {run, kMc, kMr};

}  // namespace mxrl::detail
MXRL_END_AVX512
