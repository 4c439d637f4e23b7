// Bulk bfloat16 rounding: f32_to_bf16 (formats.h) over a whole tensor, split
// over the pool, on the exec's backend (quant_kernels.h; every backend bit for
// bit the scalar loop). Used wherever a whole tensor goes onto the BF16 grid
// (compute copies, BF16 activations and gradients).
#pragma once
#include <cstdint>

#include "numerics/mx.h"

namespace mxrl {

// out[i] = f32_to_bf16(x[i]) for i < n.
void bf16_encode(const float* x, int64_t n, uint16_t* out, const Exec& exec = {});
// out[i] = bf16_to_f32(f32_to_bf16(x[i])); out may equal x.
void bf16_round(const float* x, int64_t n, float* out, const Exec& exec = {});

}  // namespace mxrl
