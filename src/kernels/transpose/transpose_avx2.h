// The 8 x 8 FP32 transpose in AVX2 registers, for the AVX2 kernels that
// move data between row and column layouts (transpose_avx2.cc, the attention's
// key chunks). Include only inside an AVX2 target region (util/target_avx2.h).
#pragma once
#include <immintrin.h>

namespace mxrl::detail {
namespace {

// r[i][d] -> r[d][i] for an 8 x 8 block of floats in registers: pairs of rows
// interleaved (unpack), then 2x2 blocks (shuffle) and 4x4 halves (permute2f128).
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

}  // namespace
}  // namespace mxrl::detail
