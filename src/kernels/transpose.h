// Matrix transpose for the backward GEMMs (wgrad reads dY^T and X^T, dgrad
// W^T). Pure data movement: every backend gives the same bytes; the AVX-512
// one moves 16x16 tiles through registers, the scalar one is the reference.
#pragma once
#include <cstdint>

#include "numerics/mx.h"

namespace mxrl {

// out[cols, rows_padded] = in[rows, cols]^T, with out[c][r] = 0 for
// rows <= r < rows_padded (MX col blocks pad M to a multiple of 32).
void transpose(const float* in, int64_t rows, int64_t cols, int64_t rows_padded, float* out, const Exec& exec = {});

namespace detail {
// One 16x16 tile: out[c * ldo + r] = in[r * ldi + c] for r, c < 16.
using TransposeTile16 = void (*)(const float* in, int64_t ldi, float* out, int64_t ldo);
TransposeTile16 transpose_tile16_avx512();
}  // namespace detail

}  // namespace mxrl
