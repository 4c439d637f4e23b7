// 16x16 FP32 tile transpose in AVX-512 registers: pairs of rows interleaved
// (unpack), then 2x2, 4x4 and 8x8 blocks exchanged (shuffle, shuffle_f32x4).
#include <cstdint>

#include <immintrin.h>

#include "kernels/transpose/transpose.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
namespace mxrl::detail {
namespace {
void tile16(const float* in, int64_t ldi, float* out, int64_t ldo) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(in + i * ldi);
  // t: within each 128-bit lane, elements of rows 2i and 2i+1 interleaved.
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r: within each lane, one column of 4 consecutive rows.
  for (int i = 0; i < 4; ++i) {
    const int b = 4 * i;
    r[b + 0] = _mm512_shuffle_ps(t[b + 0], t[b + 2], 0x44);
    r[b + 1] = _mm512_shuffle_ps(t[b + 0], t[b + 2], 0xEE);
    r[b + 2] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0x44);
    r[b + 3] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0xEE);
  }
  // t: lanes of rows 0-3 and 4-7 (and 8-11, 12-15) paired.
  for (int h = 0; h < 2; ++h) {
    const int b = 8 * h;
    for (int j = 0; j < 4; ++j) {
      t[b + j] = _mm512_shuffle_f32x4(r[b + j], r[b + 4 + j], 0x88);
      t[b + 4 + j] = _mm512_shuffle_f32x4(r[b + j], r[b + 4 + j], 0xDD);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(out + i * ldo, r[i]);
}
}  // namespace

const TransposeKernels kTransposeAvx512 = {tile16};
}  // namespace mxrl::detail
MXRL_END_AVX512
