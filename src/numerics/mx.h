// MX block quantization (OCP Microscaling v1.0, docs/reference.md §3).
//
// A tensor is viewed as rows x cols (row-major; for the row axis, rows is the
// product of the leading dimensions). Blocks are 32 values:
//   Axis::Row  1x32 along cols:  scales[rows][cols/32]
//   Axis::Col  32x1 along rows:  scales[rows/32][cols]
// codes[rows][cols] hold one element code per byte (FP6/FP4 in the low bits).
//
// Scale of a block with amax = max|x| (as FP32):
//   floor: e = unbiased_exponent(amax) - emax_elem, clamped to [-127, 127]
//   rceil: descale = fp32(amax * fp32(1/max_normal)); byte = its biased
//          exponent, +1 if any mantissa bit is set (FP32-subnormal descale:
//          1 if mantissa > 0x400000 else 0)
// A block holding NaN or ±Inf gets scale 0xFF and zero codes; an all-zero
// block gets scale 0x00 and zero codes. Elements: v = x * 2^-e exactly, then
// round to nearest even (or stochastically) onto the element grid, saturating
// at ± max normal. Stochastic rounding rounds |v| up with probability
// floor(frac * 2^32) / 2^32, drawing sr_bits(sr_key(seed), row*cols + col).
#pragma once
#include <cstdint>

#include "numerics/formats.h"
#include "util/exec.h"
#include "util/profile.h"

namespace mxrl {

inline constexpr int kMxBlock = 32;

enum class ScaleRule : uint8_t { Floor, RCeil };
enum class Axis : uint8_t { Row, Col };
enum class Rounding : uint8_t { RNE, Stochastic };
// High-precision inputs the quantizers read directly (each is exact in FP32).
// F32AsBF16: FP32 values each rounded to BF16 as it is read (f32_to_bf16: RNE,
// a NaN quieted), so the codes and scales are those of bf16_encode(x) read as
// BF16, in one pass and without the BF16 copy.
enum class InType : uint8_t { F32, BF16, F16, F32AsBF16 };

const char* scale_rule_name(ScaleRule r);
const char* axis_name(Axis a);
const char* rounding_name(Rounding r);

struct MxConfig {
  ElemType elem = ElemType::E4M3;
  ScaleRule rule = ScaleRule::RCeil;
  Axis axis = Axis::Row;
  Rounding round = Rounding::RNE;
  uint64_t seed = 0;  // stochastic rounding only
};

// The E8M0 scale byte for a finite block maximum given as FP32 bits.
uint8_t mx_scale_byte(uint32_t amax_bits, ElemType elem, ScaleRule rule);

int64_t mx_num_scales(int64_t rows, int64_t cols, Axis axis);

// Throws mxrl::Error when the axis dimension is not a multiple of 32.
void mx_quantize(const void* x, InType in, int64_t rows, int64_t cols, const MxConfig& cfg, uint8_t* codes,
                 uint8_t* scales, const Exec& exec = {});
// out = decode(code) * 2^(scale-127), one FP32 rounding; NaN scale gives NaN
// (canonical 0x7FC00000, as does a NaN element).
void mx_dequantize(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, ElemType elem, Axis axis,
                   float* out, const Exec& exec = {});

// out = mx_dequantize(mx_quantize(x)) for row blocks (cfg.axis must be Row):
// the same bits, made in one pass over the data (each thread quantizes a
// range of rows and decodes it while it is in cache). out may equal x.
void mx_round_trip_rows(const float* x, int64_t rows, int64_t cols, const MxConfig& cfg, float* out,
                        const Exec& exec = {});

}  // namespace mxrl
