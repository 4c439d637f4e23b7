// The constants the vector codecs broadcast (SimdElem in simd_avx512.h,
// Elem8 in quant_avx2.cc), derived from an element format's traits in one
// place. Scalar and ISA-free: each backend turns them into its own vectors.
#pragma once
#include <cstdint>

#include "numerics/formats.h"

namespace mxrl {

struct ElemConsts {
  // The encoder's (elem_encode: RNE, saturating).
  float max_normal;
  float min_normal;           // 2^emin
  float sub_magic;            // 2^(emin - mbits + 23): adding it rounds to the subnormal step
  uint32_t sub_magic_bits;    // its bits
  uint32_t round_half;        // 2^(23 - mbits - 1) - 1
  uint32_t exp_adjust;        // (127 - bias) << mbits
  uint32_t nan_code;          // 0 for formats without NaN
  int shift;                  // 23 - mbits
  int sign_shift;             // 32 - bits: FP32 sign bit <-> code sign bit
  int emin, emax, mbits;
  // The decoder's (elem_decode).
  float dec_mul;              // 2^(127 - bias)
  uint32_t dec_signbit;       // the code's sign bit
  uint32_t dec_special_min;   // magnitudes from here up are NaN or Inf (when has_nan)
  bool has_nan, has_inf;
  // The scale rule's (mx_scale_byte).
  float inv_max_normal;       // 1 / max_normal, rounded as mx_scale_byte rounds it

  // Defined out of line (formats.cc, the baseline target): headers included
  // inside a SIMD target region define no code of their own here.
  explicit ElemConsts(ElemType t);
};

}  // namespace mxrl
