// One traits table for the linear precisions, in the manner of ggml's
// type_traits: for each precision, how its weights are held and made from the
// FP32 master, how the GEMM reads them, how the activations entering the
// linear are rounded, how the learner puts its backward operands on the same
// grid, and the parts a digest or a sync carries. Code that needs to know a
// precision asks this table; nothing else switches on Precision.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/gemm/gemm.h"
#include "model/plan.h"

namespace mxrl {

struct PreparedLinear;

// One array a prepared linear holds, as shipped and digested.
struct HeldPart {
  const char* part;  // "f32", "bf16", "codes", "scales"
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  int64_t bytes;
};

// Element counts of what a linear [n, k] of a precision holds.
struct HeldSizes {
  int64_t f32 = 0, bf16 = 0, codes = 0, mx_scales = 0, fp8_scales = 0;
};

struct PrecisionTraits {
  Precision precision;
  const char* name;  // as in plans: "fp32", "bf16", "mxfp8", "fp8-tensor", "fp8-block128"
  WFormat wformat;   // how the GEMM reads the weights
  bool needs_k32;    // in features must be a multiple of 32 (MX row blocks)
  bool trainable;    // the learner has a backward for it (pack_operand and round_grad set)
  // quantize_activations and round_grad are plain BF16 rounding, which gemm()
  // does to its x operand itself under the pair chain (gemm.h: xb = bf16(x),
  // and bf16(bf16(x)) = bf16(x)): callers of gemm() may skip them, bit for bit
  // the same result. Not gemm_split_k, which multiplies its operands as given.
  bool gemm_rounds_x;
  HeldSizes (*held_sizes)(int64_t n, int64_t k);
  // L.name, prec, n, k are set: fill its held weights from the FP32 master w[n, k]
  // (every precision but fp32 starts from the BF16 compute copy, docs/reference.md §4).
  void (*prepare)(PreparedLinear& L, const float* w, const Exec& exec);
  // The GEMM's view of what L holds.
  void (*view)(const PreparedLinear& L, WeightView& v);
  // out[m, k] = x as a linear of this precision multiplies it (FP32 copy, BF16
  // rounding, or per-token MX / FP8 quantization and dequantization).
  void (*quantize_activations)(const float* x, int64_t m, int64_t k, const LinearPrecision& p, float* out,
                               const Exec& exec);
  // Learner: the transpose of a [rows, cols] FP32 operand, A^T [cols, rows_padded],
  // packed as a GEMM weight on this grid (the dgrad weight W^T, the wgrad
  // operand X^T), read from A as it is (PackedWeight::pack_transposed: no
  // transpose). Rows from `rows` to rows_padded are zeros (MX blocks run along
  // A's rows, 32 x 1, so MX needs rows_padded a multiple of 32).
  PackedWeight (*pack_operand)(const LinearPrecision& p, const float* a, int64_t rows, int64_t rows_padded,
                               int64_t cols, const Exec& exec);
  // Learner: a gradient operand (dY or dY^T) rounded onto this grid, out[rows,
  // cols] from a (out may equal a).
  void (*round_grad)(const LinearPrecision& p, ElemType grad_elem, const float* a, float* out, int64_t rows,
                     int64_t cols, const Exec& exec);
  // What L holds, part by part (digests, sync).
  std::vector<HeldPart> (*held_parts)(const PreparedLinear& L);
};

const PrecisionTraits& precision_traits(Precision p);

}  // namespace mxrl
