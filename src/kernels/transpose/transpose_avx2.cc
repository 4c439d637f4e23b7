// 16x16 FP32 tile transpose for Backend::Avx2: four 8x8 blocks through
// AVX2 registers (transpose_avx2.h), block (i, j) of the input to (j, i).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "kernels/transpose/transpose.h"
#include "util/target_avx2.h"

MXRL_BEGIN_AVX2
#include "kernels/transpose/transpose_avx2.h"

namespace mxrl::detail {
namespace {
void tile16(const float* in, int64_t ldi, float* out, int64_t ldo) {
  for (int bi = 0; bi < 2; ++bi)
    for (int bj = 0; bj < 2; ++bj) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + (8 * bi + i) * ldi + 8 * bj);
      transpose8x8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + (8 * bj + j) * ldo + 8 * bi, r[j]);
    }
}
}  // namespace

const TransposeKernels kTransposeAvx2 = {tile16};
}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
