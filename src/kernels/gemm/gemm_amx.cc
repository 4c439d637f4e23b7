// The AMX pair kernel (PairKernel::Amx, gemm.h): BF16 and MX weights on
// TDPBF16PS tiles. Only when asked for and amx_available(); Auto never picks
// it, because TDPBF16PS is not the contract's pair chain (it sums 16 pairs per
// output in its own order). What it keeps is the invariance:
//   - A = the X rows as BF16 pairs, converted exactly as x_row_pairs does
//     (RNE, DAZ, gemm_avx512_common.h), K padded with zeros to a multiple of
//     32, rows packed per tile of 16 (a partial last tile padded with zero
//     rows, which only ever meet their own, discarded, outputs);
//   - B = the panel's weights decoded to pairs by decode_panel_pairs (exactly
//     the values the other pair kernels use), zero pairs past K;
//   - each C tile starts at zero and takes one TDPBF16PS per 32-wide K step,
//     k = 0 upward, over all of K with no split and no M-dependent K
//     blocking, and is stored once at the end.
// So an output's bits depend only on its X row, its W column and K: not on M,
// the row's position or tile, the row blocking, the panel run or the threads
// (gemm_test.cc checks all of these bitwise).
//
// Denormals (measured on this Xeon with AMX, gemm_test.cc GemmAmx.FlushesLikeThePairChain):
// TDPBF16PS treats BF16 subnormal inputs as zero and flushes subnormal
// results to zero, whatever MXCSR says, as VDPBF16PS does. NaN outputs are
// replaced by the canonical 0x7FC00000 on the way out (store_row).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/gemm/aligned_scratch.h"
#include "kernels/gemm/gemm.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AMX
#include "numerics/simd_avx512.h"

#include "kernels/gemm/gemm_avx512_common.h"

namespace mxrl::detail {
namespace {
// The pair helpers' policy: only the conversion of X is used here (the same
// RNE + DAZ as the FMA path, bit for bit VCVTNE2PS2BF16).
struct AmxMac {
  [[maybe_unused]] static constexpr bool kDot = false;
  static __m512i to_bf16(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(bf16_rne_daz16(lo))),
                              _mm512_cvtepi32_epi16(bf16_rne_daz16(hi)), 1);
  }
  static __m512 dot(__m512 acc, __m512i, __m512i) { return acc; }  // unused
};
}  // namespace
}  // namespace mxrl::detail

#define MXRL_PAIR_LUT_TARGET MXRL_TARGET_AVX512_VBMI  // (the AMX kernel decodes with decode_panel_pairs)
#include "kernels/gemm/gemm_pairs_avx512.h"

namespace mxrl::detail {
namespace {
constexpr int kTileRows = 16;                       // rows of an A or C tile
constexpr int kStepPairs = 16;                      // K pairs per TDPBF16PS (32 K)
constexpr int kTileWords = kTileRows * kStepPairs;  // uint32 words of one A tile (1 KiB)
constexpr int64_t kAmxBlockRows = 256;              // rows per block handed to the kernel

// Tile registers: 0-3 accumulators C[row tile 0..1][column half 0..1] (tmm0:
// C00, tmm1: C01, tmm2: C10, tmm3: C11), 4-5 A (row tiles), 6-7 B (column
// halves); every one 16 rows of 64 bytes. (GCC's tile intrinsics stringify
// their register arguments: they must be literal numbers.)
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = kTileRows;
  }
};
static_assert(sizeof(TileConfig) == 64);

// Per-thread buffers: X pairs in tile order, one panel decoded over all of K
// (kernels/gemm/aligned_scratch.h), and one block of C.
struct AmxScratch {
  AlignedScratch<uint32_t> xp;
  AlignedScratch<uint32_t> wb;
  alignas(64) float c[2 * kTileRows * kPanel];
  alignas(64) uint32_t bstep[kStepPairs * kPanel];  // one K step of a panel (few rows)
};

// Rows [m0, m0 + rows) of X as BF16 pairs: the A tile of row tile t and K
// step s, [16 rows][16 pairs], at xp + (t * steps + s) * kTileWords. Rows past
// the end and K past K are zeros.
void pack_x_tiles(const float* x, int64_t K, int64_t m0, int64_t rows, int64_t tiles, int64_t steps, uint32_t* xp) {
  for (int64_t t = 0; t < tiles; ++t)
    for (int i = 0; i < kTileRows; ++i) {
      const int64_t r = t * kTileRows + i;
      uint32_t* d = xp + t * steps * kTileWords + i * kStepPairs;
      if (r >= rows) {
        for (int64_t s = 0; s < steps; ++s) _mm512_store_si512(d + s * kTileWords, _mm512_setzero_si512());
        continue;
      }
      const float* src = x + (m0 + r) * K;
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t k = s * 2 * kStepPairs;
        const __m512 lo = _mm512_maskz_loadu_ps(lane_mask(K - k), src + k);
        const __m512 hi = _mm512_maskz_loadu_ps(lane_mask(K - k - 16), src + k + 16);
        _mm512_store_si512(d + s * kTileWords, AmxMac::to_bf16(lo, hi));
      }
    }
}

// One or two row tiles (TA) x the panel's 32 columns over all K steps, the
// B tiles of step s ([16 k pairs][32 columns], 128-byte rows) from b_of(s);
// C stored to c [TA * 16 rows][32]. a: the first row tile's A tiles (the
// second's follow at + steps * kTileWords). The one TDPBF16PS sequence of
// this kernel family: whatever supplies B, the same bits.
template <int TA, class BOf>
void tile_steps(const uint32_t* a, int64_t steps, BOf&& b_of, float* c) {
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (TA == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  const uint32_t* a1 = a + steps * kTileWords;
  for (int64_t s = 0; s < steps; ++s) {
    const uint32_t* bs = b_of(s);
    _tile_loadd(6, bs, kPanel * 4);                      // B, columns 0-15
    _tile_loadd(7, bs + 16, kPanel * 4);                 // B, columns 16-31
    _tile_loadd(4, a + s * kTileWords, kStepPairs * 4);  // A, row tile 0
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (TA == 2) {
      _tile_loadd(5, a1 + s * kTileWords, kStepPairs * 4);  // A, row tile 1
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, kPanel * 4);
  _tile_stored(1, c + 16, kPanel * 4);
  if constexpr (TA == 2) {
    _tile_stored(2, c + kTileRows * kPanel, kPanel * 4);
    _tile_stored(3, c + kTileRows * kPanel + 16, kPanel * 4);
  }
}

// B from the panel decoded whole into b ([k pair][32]).
template <int TA>
void tile_block(const uint32_t* a, int64_t steps, const uint32_t* b, float* c) {
  tile_steps<TA>(
      a, steps, [b](int64_t s) { return b + s * kStepPairs * kPanel; }, c);
}

// Few rows (one or two row tiles: decode, small batches): the panel is
// decoded one K step at a time into a 2 KiB buffer that stays in L1, right
// before the TDPBF16PS that use it, instead of whole into wb.
template <int TA, Src S>
void tile_block_streamed(const uint32_t* a, int64_t steps, const PackedWeight& w, int64_t p, const Ctx& ctx,
                         uint32_t* bstep, float* c) {
  const int64_t K = w.k();
  tile_steps<TA>(
      a, steps,
      [&](int64_t s) {
        const int64_t k0 = s * 2 * kStepPairs, k1 = std::min(K, k0 + 2 * kStepPairs);
        if (k1 - k0 < 2 * kStepPairs) {  // the last, partial step: zero pairs past K
          const int64_t kp = (k1 - k0 + 1) / 2;
          std::memset(bstep + kp * kPanel, 0, static_cast<size_t>(kStepPairs - kp) * kPanel * sizeof(uint32_t));
        }
        decode_panel_pairs<S>(w, p, k0, k1, bstep, ctx);
        return static_cast<const uint32_t*>(bstep);
      },
      c);
}

template <Src S>
void amx_run_src(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                 AmxScratch& sc) {
  const Ctx c(w);
  const int64_t K = w.k(), N = w.n(), rows = m1 - m0;
  const int64_t steps = (K + 2 * kStepPairs - 1) / (2 * kStepPairs), kpairs = (K + 1) / 2;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
  uint32_t* xp = sc.xp.get(static_cast<size_t>(tiles * steps * kTileWords));
  uint32_t* wb = nullptr;
  if (tiles > 2) {
    wb = sc.wb.get(static_cast<size_t>(steps * kStepPairs * kPanel));
    // Pairs past K (the pad to a whole step) are zeros; the decode never writes them.
    std::memset(wb + kpairs * kPanel, 0, static_cast<size_t>(steps * kStepPairs - kpairs) * kPanel * sizeof(uint32_t));
  }
  pack_x_tiles(x, K, m0, rows, tiles, steps, xp);
  const TileConfig cfg;
  _tile_loadconfig(&cfg);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t cols = N - p * kPanel;
    const __mmask16 mk0 = lane_mask(cols), mk1 = lane_mask(cols - 16);
    if (tiles <= 2) {  // decode on the fly (see tile_block_streamed)
      const bool generic = is_fast(S) && !w.panel_fast(p);
      if (tiles == 2)
        generic ? tile_block_streamed<2, Src::Generic>(xp, steps, w, p, c, sc.bstep, sc.c)
                : tile_block_streamed<2, S>(xp, steps, w, p, c, sc.bstep, sc.c);
      else
        generic ? tile_block_streamed<1, Src::Generic>(xp, steps, w, p, c, sc.bstep, sc.c)
                : tile_block_streamed<1, S>(xp, steps, w, p, c, sc.bstep, sc.c);
      for (int64_t r = 0; r < rows; ++r) {
        const float* cr = sc.c + r * kPanel;
        store_row(y + (m0 + r) * N + p * kPanel, _mm512_load_ps(cr), _mm512_load_ps(cr + 16), mk0, mk1, true);
      }
      continue;
    }
    if (is_fast(S) && !w.panel_fast(p))
      decode_panel_pairs<Src::Generic>(w, p, 0, K, wb, c);
    else
      decode_panel_pairs<S>(w, p, 0, K, wb, c);
    for (int64_t t = 0; t < tiles; t += 2) {
      if (t + 1 < tiles)
        tile_block<2>(xp + t * steps * kTileWords, steps, wb, sc.c);
      else
        tile_block<1>(xp + t * steps * kTileWords, steps, wb, sc.c);
      const int64_t r1 = std::min(rows, (t + 2) * kTileRows);
      for (int64_t r = t * kTileRows; r < r1; ++r) {
        const float* cr = sc.c + (r - t * kTileRows) * kPanel;
        store_row(y + (m0 + r) * N + p * kPanel, _mm512_load_ps(cr), _mm512_load_ps(cr + 16), mk0, mk1, true);
      }
    }
  }
  _tile_release();
}
}  // namespace

void gemm_pairs_amx(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  static thread_local AmxScratch scratch;
  if (m1 <= m0 || p1 <= p0) return;
  if (w.format() == WFormat::BF16) return amx_run_src<Src::BF16>(x, w, y, m0, m1, p0, p1, scratch);
  if (w.elem() == ElemType::E4M3) return amx_run_src<Src::Fast20>(x, w, y, m0, m1, p0, p1, scratch);
  if (w.elem() == ElemType::E5M2) return amx_run_src<Src::Fast21>(x, w, y, m0, m1, p0, p1, scratch);
  return amx_run_src<Src::Generic>(x, w, y, m0, m1, p0, p1, scratch);
}

const GemmKernels kGemmAmx = {gemm_pairs_amx, kAmxBlockRows, kTileRows};

}  // namespace mxrl::detail
MXRL_END_AMX
