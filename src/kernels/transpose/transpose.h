// Matrix transpose for the backward GEMMs (wgrad reads dY^T and X^T, dgrad
// W^T). Pure data movement: every backend gives the same bytes; the AVX2 and
// AVX-512 ones move 16x16 tiles through registers, the scalar one is the reference.
#pragma once
#include <cstdint>

#include "util/exec.h"

namespace mxrl {

// out[cols, rows_padded] = in[rows, cols]^T, with out[c][r] = 0 for
// rows <= r < rows_padded (MX col blocks pad M to a multiple of 32).
void transpose(const float* in, int64_t rows, int64_t cols, int64_t rows_padded, float* out, const Exec& exec = {});

namespace detail {
struct TransposeKernels {
  // One 16x16 tile: out[c * ldo + r] = in[r * ldi + c] for r, c < 16.
  void (*tile16)(const float* in, int64_t ldi, float* out, int64_t ldo);
};
extern const TransposeKernels kTransposeScalar;
#if defined(__x86_64__)
extern const TransposeKernels kTransposeAvx2;
extern const TransposeKernels kTransposeAvx512;
#endif
}  // namespace detail

}  // namespace mxrl
