// Quantizing whole safetensors files to MX and back (`mxrl quantize` and
// `mxrl dequantize`).
//
// Every tensor X (F32, BF16 or F16) of the input becomes, in the output,
//   X        element codes, same shape: F8_E4M3 / F8_E5M2, or U8 holding one
//            FP6/FP4 code per byte in the low bits
//   X_scale  F8_E8M0 scales, shape [..., C/32] (row) or [R/32, C] (col)
// with __metadata__ recording mxrl.format=mx, elem, scale rule, axis and
// rounding, so that dequantization needs no flags and restores F32 tensors
// under the original names. Everything is validated before anything is
// written, and files are written atomically.
#pragma once
#include <cstdint>
#include <string>

#include "numerics/mx.h"

namespace mxrl {

struct MxFileStats {
  int64_t tensors = 0;
  int64_t elements = 0;
  int64_t bytes_in = 0, bytes_out = 0;
};

MxFileStats quantize_file(const std::string& in, const std::string& out, const MxConfig& cfg, const Exec& exec = {});
MxFileStats dequantize_file(const std::string& in, const std::string& out, const Exec& exec = {});

// The stochastic-rounding seed tensor `name` is quantized with (each tensor
// draws its own stream).
uint64_t tensor_seed(uint64_t seed, const std::string& name);

}  // namespace mxrl
