#include "kernels/transpose/transpose.h"

#include <algorithm>

#include "util/cpu.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
void tile_scalar(const float* in, int64_t ldi, int64_t nr, int64_t nc, float* out, int64_t ldo) {
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t r = 0; r < nr; ++r) out[c * ldo + r] = in[r * ldi + c];
}
void tile16_scalar(const float* in, int64_t ldi, float* out, int64_t ldo) { tile_scalar(in, ldi, 16, 16, out, ldo); }
}  // namespace

namespace detail {
const TransposeKernels kTransposeScalar = {tile16_scalar};
}  // namespace detail

void transpose(const float* in, int64_t rows, int64_t cols, int64_t rows_padded, float* out, const Exec& exec) {
  constexpr int64_t T = 16;
  const auto& k = backend_table(exec.backend, detail::kTransposeScalar, MXRL_AVX2(detail::kTransposeAvx2),
                                MXRL_AVX512(detail::kTransposeAvx512));
  // Tasks own 16-column strips of the input (16-row strips of the output).
  parallel_for(exec.pool, (cols + T - 1) / T, [&](int64_t b0, int64_t b1) {
    for (int64_t cb = b0; cb < b1; ++cb) {
      const int64_t c0 = cb * T, nc = std::min(T, cols - c0);
      for (int64_t r0 = 0; r0 < rows; r0 += T) {
        const int64_t nr = std::min(T, rows - r0);
        const float* src = in + r0 * cols + c0;
        float* dst = out + c0 * rows_padded + r0;
        if (nr == T && nc == T)
          k.tile16(src, cols, dst, rows_padded);
        else
          tile_scalar(src, cols, nr, nc, dst, rows_padded);
      }
      for (int64_t c = c0; c < c0 + nc; ++c) std::fill(out + c * rows_padded + rows, out + (c + 1) * rows_padded, 0.0f);
    }
  });
}

}  // namespace mxrl
