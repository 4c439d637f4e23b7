// The one map between element formats and safetensors dtypes, used wherever
// codes are written, read, digested or shipped: FP8 codes are F8_E4M3 /
// F8_E5M2, FP6 / FP4 codes one per byte (low bits) in U8; E8M0 scales F8_E8M0.
#pragma once
#include "io/safetensors.h"
#include "numerics/formats.h"

namespace mxrl {

inline DType code_dtype(ElemType e) {
  switch (e) {
    case ElemType::E4M3: return DType::F8_E4M3;
    case ElemType::E5M2: return DType::F8_E5M2;
    default: return DType::U8;  // FP6 / FP4: one code a byte, in the low bits
  }
}

}  // namespace mxrl
