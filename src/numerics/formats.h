// Element number formats (OCP Microscaling v1.0, IEEE half, bfloat16) and the
// E8M0 scale. One traits table describes every MX element type; encode and
// decode here are the scalar reference that the fast kernels are tested
// against.
//
// MX element encoding is round-to-nearest-even and saturating: anything whose
// magnitude exceeds the max normal (Inf included) becomes ±max normal, never
// Inf. NaN encodes to the format's NaN code (E4M3 S.1111.111, E5M2
// S.11111.11); FP6/FP4 have none and encode NaN as +0 (an MX block holding a
// NaN is marked by its 0xFF scale instead). The sign of zero is kept.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace mxrl {

enum class ElemType : uint8_t { E4M3, E5M2, E2M3, E3M2, E2M1 };
inline constexpr ElemType kAllElemTypes[] = {ElemType::E4M3, ElemType::E5M2, ElemType::E2M3, ElemType::E3M2,
                                             ElemType::E2M1};

struct ElemTraits {
  const char* name;  // "e4m3", ...
  int bits;          // 8, 6 or 4 (codes live in the low bits of a byte)
  int ebits, mbits;
  int bias;
  int emax;  // exponent of the largest power of two (emax_elem)
  float max_normal;
  uint8_t max_code;  // positive max normal
  bool has_inf;      // E5M2 only
  bool has_nan;      // E4M3, E5M2
  uint8_t nan_code;  // positive NaN code when has_nan
  int emin() const { return 1 - bias; }
  uint8_t sign_bit() const { return static_cast<uint8_t>(1u << (bits - 1)); }
  int num_codes() const { return 1 << bits; }
};

const ElemTraits& elem_traits(ElemType t);
std::optional<ElemType> elem_from_name(std::string_view name);

// Scalar reference codecs.
float elem_decode(ElemType t, uint8_t code);
uint8_t elem_encode(ElemType t, float x);   // RNE, saturating
uint8_t elem_encode(ElemType t, double x);  // same, from an exact double
// Encode a value already on the grid (or ±0) exactly; used after rounding.
uint8_t elem_encode_exact(ElemType t, double a_on_grid, bool negative);

// IEEE binary16 and bfloat16: RNE, overflow to Inf, NaN stays (quiet) NaN,
// subnormals kept.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// E8M0: 2^(b-127) for b in 0..254; 0xFF is NaN.
inline constexpr uint8_t kE8M0Nan = 0xFF;

// 2^(b - 127) (b = 0: the FP32 subnormal 2^-127), b = 0xFF: the quiet NaN 0x7FC00000.
inline float e8m0_to_f32(uint8_t b) {
  const uint32_t bits = b == 0xFF ? 0x7FC00000u : b == 0 ? 0x00400000u : uint32_t(b) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// RNE on the upper half (overflow -> Inf); NaN keeps its payload, made quiet.
// Branch-free, so loops over tensors vectorize it (numerics/bf16.h).
inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace mxrl
