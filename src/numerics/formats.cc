#include "numerics/formats.h"

#include "numerics/elem_consts.h"

#include <cmath>
#include <limits>

namespace mxrl {

namespace {
//                         name    bits e  m  bias emax max      maxcode inf    nan    nancode
constexpr ElemTraits kTraits[] = {
    {"e4m3", 8, 4, 3, 7, 8, 448.0f, 0x7E, false, true, 0x7F},
    {"e5m2", 8, 5, 2, 15, 15, 57344.0f, 0x7B, true, true, 0x7F},
    {"e2m3", 6, 2, 3, 1, 2, 7.5f, 0x1F, false, false, 0},
    {"e3m2", 6, 3, 2, 3, 4, 28.0f, 0x1F, false, false, 0},
    {"e2m1", 4, 2, 1, 1, 2, 6.0f, 0x7, false, false, 0},
};

// The generic minifloat: (ebits, mbits, bias), whether its all-ones exponent
// is Inf/NaN (IEEE) and whether overflow saturates or goes to Inf.
struct Minifloat {
  int ebits, mbits, bias;
  double max_normal;
  bool ieee_specials;
};
constexpr Minifloat kF16{5, 10, 15, 65504.0, true};

// |x| rounded to nearest-even on the grid of `f` (no clamping). x is finite.
double round_to_grid(double a, int mbits, int emin) {
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int E = std::max(e - 1, emin);
  const double q = std::ldexp(1.0, E - mbits);
  return std::nearbyint(a / q) * q;  // a / q is exact; default mode is RNE
}

// Code bits (without sign) of a non-negative value exactly on the grid.
uint32_t exact_code(double a, int mbits, int bias) {
  if (a == 0) return 0;
  const int emin = 1 - bias;
  if (a < std::ldexp(1.0, emin)) return static_cast<uint32_t>(a / std::ldexp(1.0, emin - mbits));
  int e;
  std::frexp(a, &e);
  const int E = e - 1;
  const uint32_t mant = static_cast<uint32_t>(a / std::ldexp(1.0, E - mbits)) - (1u << mbits);
  return (static_cast<uint32_t>(E + bias) << mbits) | mant;
}

double decode_bits(uint32_t mag, int mbits, int bias) {
  const uint32_t E = mag >> mbits, m = mag & ((1u << mbits) - 1);
  if (E == 0) return std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -mbits), static_cast<int>(E) - bias);
}
}  // namespace

const ElemTraits& elem_traits(ElemType t) { return kTraits[static_cast<int>(t)]; }

std::optional<ElemType> elem_from_name(std::string_view name) {
  for (ElemType t : kAllElemTypes)
    if (name == elem_traits(t).name) return t;
  return std::nullopt;
}

float elem_decode(ElemType t, uint8_t code) {
  const ElemTraits& f = elem_traits(t);
  const bool neg = code & f.sign_bit();
  const uint32_t mag = code & (f.sign_bit() - 1u);
  const uint32_t E = mag >> f.mbits;
  double v;
  if (t == ElemType::E4M3 && mag == 0x7F) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (f.has_inf && E == (1u << f.ebits) - 1) {
    v = (mag & ((1u << f.mbits) - 1)) ? std::numeric_limits<double>::quiet_NaN()
                                      : std::numeric_limits<double>::infinity();
  } else {
    v = decode_bits(mag, f.mbits, f.bias);
  }
  return static_cast<float>(neg ? -v : v);
}

uint8_t elem_encode_exact(ElemType t, double a, bool negative) {
  const ElemTraits& f = elem_traits(t);
  return static_cast<uint8_t>((negative ? f.sign_bit() : 0) | exact_code(a, f.mbits, f.bias));
}

uint8_t elem_encode(ElemType t, double x) {
  const ElemTraits& f = elem_traits(t);
  if (std::isnan(x)) return f.has_nan ? f.nan_code : 0;
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  if (a >= f.max_normal) return static_cast<uint8_t>((neg ? f.sign_bit() : 0) | f.max_code);
  double r = round_to_grid(a, f.mbits, f.emin());
  if (r > f.max_normal) r = f.max_normal;
  return elem_encode_exact(t, r, neg);
}

uint8_t elem_encode(ElemType t, float x) { return elem_encode(t, static_cast<double>(x)); }

uint16_t f32_to_f16(float x) {
  const Minifloat& f = kF16;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7E00 | static_cast<uint16_t>((f32_bits(x) >> 13) & 0x1FF);
  const double a = std::fabs(static_cast<double>(x));
  const double r = std::isinf(a) ? a : round_to_grid(a, f.mbits, 1 - f.bias);
  if (r > f.max_normal) return sign | 0x7C00;  // overflow (after rounding) is Inf
  return sign | static_cast<uint16_t>(exact_code(r, f.mbits, f.bias));
}

float f16_to_f32(uint16_t h) {
  const bool neg = h & 0x8000;
  const uint32_t mag = h & 0x7FFF;
  double v;
  if ((mag >> 10) == 0x1F)
    v = (mag & 0x3FF) ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else
    v = decode_bits(mag, kF16.mbits, kF16.bias);
  float out = static_cast<float>(neg ? -v : v);
  if (std::isnan(v)) out = f32_from_bits((neg ? 0x80000000u : 0) | 0x7FC00000u | ((mag & 0x3FF) << 13));
  return out;
}

ElemConsts::ElemConsts(ElemType t) {
  const ElemTraits& f = elem_traits(t);
  emin = f.emin();
  emax = f.emax;
  mbits = f.mbits;
  shift = 23 - f.mbits;
  sign_shift = 32 - f.bits;
  max_normal = f.max_normal;
  min_normal = std::ldexp(1.0f, emin);
  sub_magic = std::ldexp(1.0f, emin - f.mbits + 23);
  sub_magic_bits = f32_bits(sub_magic);
  round_half = (1u << (shift - 1)) - 1;
  exp_adjust = static_cast<uint32_t>((127 - f.bias) << f.mbits);
  nan_code = f.has_nan ? f.nan_code : 0;
  dec_mul = std::ldexp(1.0f, 127 - f.bias);
  dec_signbit = f.sign_bit();
  dec_special_min = f.has_inf ? 0x7C : 0x7F;
  has_nan = f.has_nan;
  has_inf = f.has_inf;
  inv_max_normal = 1.0f / f.max_normal;
}

}  // namespace mxrl
