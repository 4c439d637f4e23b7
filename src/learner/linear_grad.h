// The two backward GEMMs of a linear layer Y[M, N] = X[M, K] W^T, in the
// precision the layer computes its forward in (docs/reference.md §4):
//
//   precision | dgrad  dX = dY W            | wgrad  dW = dY^T X
//   fp32      | FP32 x FP32                  | FP32 x FP32
//   bf16      | BF16(dY) x BF16(W)           | BF16(dY) x BF16(X)
//   mxfp8     | dY row (1x32 along N)        | dY col (32x1 along M)
//             |   x W col (32x1 along N)     |   x X col (32x1 along M)
//
// MX operands are quantized independently from high precision (the W col
// quantization from the BF16 compute copy of the master, never from the row
// codes); gradients use `grad_elem` (E4M3, or E5M2 in the hybrid recipe), X
// and W always the layer's element type. Every GEMM is the forward's
// batch-invariant FP32-accumulating kernel; dequantizing an MX operand to FP32
// is exact, so an MX x MX product is computed exactly as the hardware would.
// Along M, MX col blocks are padded with zero rows to a multiple of 32.
#pragma once
#include <cstdint>

#include "kernels/gemm/gemm.h"
#include "model/plan.h"

namespace mxrl {

// W^T[K, N] packed for dgrad, from the FP32 master W[N, K]: FP32, BF16, or
// the MX col quantization of the BF16 compute copy. Throws naming the tensor
// when the layer's precision has no backward here (the FP8 grids) or when an
// MX layer's N is not a multiple of 32.
PackedWeight prepare_dgrad_weight(const std::string& name, const float* w, int64_t n, int64_t k,
                                  const LinearPrecision& prec, const Exec& exec);

// dx[m, k] = dY[m, n] W (accumulate: dx += it). wt from prepare_dgrad_weight.
void linear_dgrad(const LinearPrecision& prec, ElemType grad_elem, const PackedWeight& wt, const float* dy, int64_t m,
                  float* dx, bool accumulate, const Exec& exec);

// dw[n, k] += dY[m, n]^T X[m, k].
void linear_wgrad(const LinearPrecision& prec, ElemType grad_elem, const float* dy, const float* x, int64_t m,
                  int64_t n, int64_t k, float* dw, const Exec& exec);
// The same in two steps, for linears that read the same X (q, k, v; gate,
// up): X^T packed once as the wgrad GEMM's weight operand on prec's grid (MX:
// X's column blocks, rows zero-padded to a multiple of 32), then used by each.
PackedWeight wgrad_operand(const LinearPrecision& prec, const float* x, int64_t m, int64_t k, const Exec& exec);
void linear_wgrad(const LinearPrecision& prec, ElemType grad_elem, const float* dy, const PackedWeight& xp, int64_t m,
                  int64_t n, float* dw, const Exec& exec);

}  // namespace mxrl
