// Scalar reference kernels: written for clarity, computing in double where
// that makes exactness evident. The AVX-512 kernels must match them bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "numerics/quant_kernels.h"
#include "numerics/rng.h"

namespace mxrl::detail {
namespace {

float load_in(const void* x, InType in, int64_t i) {
  switch (in) {
    case InType::F32: {
      float f;
      std::memcpy(&f, static_cast<const char*>(x) + 4 * i, 4);
      return f;
    }
    case InType::BF16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(x) + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case InType::F16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(x) + 2 * i, 2);
      return f16_to_f32(h);
    }
    case InType::F32AsBF16: {
      float f;
      std::memcpy(&f, static_cast<const char*>(x) + 4 * i, 4);
      return bf16_to_f32(f32_to_bf16(f));
    }
  }
  return 0;
}

// One element of a finite MX block with scale exponent e.
uint8_t mx_elem(float x, int e, const MxConfig& cfg, uint64_t key, uint64_t idx) {
  const double v = std::ldexp(static_cast<double>(x), -e);  // exact
  if (cfg.round == Rounding::RNE) return elem_encode(cfg.elem, v);
  const ElemTraits& f = elem_traits(cfg.elem);
  const bool neg = std::signbit(v);
  const double a = std::min(std::fabs(v), static_cast<double>(f.max_normal));
  int ex;
  std::frexp(a, &ex);
  const int eq = std::max(ex - 1, f.emin()) - f.mbits;  // exponent of the grid step at a
  const double m = std::ldexp(a, -eq), fl = std::floor(m);
  const auto threshold = static_cast<uint32_t>(std::floor((m - fl) * 4294967296.0));
  const bool up = sr_bits(key, idx) < threshold;
  const double r = std::min(std::ldexp(fl + (up ? 1 : 0), eq), static_cast<double>(f.max_normal));
  return elem_encode_exact(cfg.elem, r, neg);
}

// Quantizes the 32 values x[idx0 + k*stride] (k < 32) as one block.
void mx_block(const void* x, InType in, int64_t idx0, int64_t stride, const MxConfig& cfg, uint8_t* codes,
              uint8_t* scale) {
  uint32_t amax = 0;
  for (int k = 0; k < kMxBlock; ++k) amax = std::max(amax, abs_bits(f32_bits(load_in(x, in, idx0 + k * stride))));
  if (amax >= kInfBits) {  // NaN or Inf in the block
    *scale = kE8M0Nan;
    for (int k = 0; k < kMxBlock; ++k) codes[idx0 + k * stride] = 0;
    return;
  }
  *scale = mx_scale_byte(amax, cfg.elem, cfg.rule);
  const int e = static_cast<int>(*scale) - 127;
  const uint64_t key = sr_key(cfg.seed);
  for (int k = 0; k < kMxBlock; ++k) {
    const int64_t i = idx0 + k * stride;
    codes[i] = mx_elem(load_in(x, in, i), e, cfg, key, static_cast<uint64_t>(i));
  }
}

void mx_quant_row(const void* x, InType in, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg, uint8_t* codes,
                  uint8_t* scales) {
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) mx_block(x, in, r * cols + b * kMxBlock, 1, cfg, codes, &scales[r * nb + b]);
}

void mx_quant_col(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                  const MxConfig& cfg, uint8_t* codes, uint8_t* scales) {
  for (int64_t g = g0; g < g1; ++g)
    for (int64_t c = c0; c < c1; ++c) mx_block(x, in, g * kMxBlock * cols + c, cols, cfg, codes, &scales[g * cols + c]);
}

float mx_value(uint8_t code, uint8_t scale, ElemType elem) {
  if (scale == kE8M0Nan) return f32_from_bits(kCanonicalNan);
  const double y = static_cast<double>(elem_decode(elem, code)) * std::ldexp(1.0, scale - 127);
  const float out = static_cast<float>(y);  // the one rounding
  return std::isnan(out) ? f32_from_bits(kCanonicalNan) : out;
}

void mx_dequant_row(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t r0, int64_t r1, ElemType elem,
                    float* out) {
  const int64_t nb = cols / kMxBlock;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = mx_value(codes[r * cols + c], scales[r * nb + c / kMxBlock], elem);
}

void mx_dequant_col(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t g0, int64_t g1, int64_t c0,
                    int64_t c1, ElemType elem, float* out) {
  for (int64_t r = g0 * kMxBlock; r < g1 * kMxBlock; ++r)
    for (int64_t c = c0; c < c1; ++c)
      out[r * cols + c] = mx_value(codes[r * cols + c], scales[(r / kMxBlock) * cols + c], elem);
}

void group_amax(const void* x, InType in, int64_t cols, int64_t gc, int64_t r0, int64_t r1, uint32_t* amax) {
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      uint32_t& m = amax[r * ncg + c / gc];
      if (c % gc == 0) m = 0;
      m = std::max(m, abs_bits(f32_bits(load_in(x, in, r * cols + c))));
    }
}

void group_encode(const void* x, InType in, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1, ElemType elem,
                  const float* scales, uint8_t* codes) {
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = scales[(r / gr) * ncg + c / gc];
      const int64_t i = r * cols + c;
      codes[i] = s == 0.0f ? 0 : elem_encode(elem, load_in(x, in, i) / s);  // fp32 division
    }
}

void group_decode(const uint8_t* codes, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1, ElemType elem,
                  const float* scales, float* out) {
  const int64_t ncg = (cols + gc - 1) / gc;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float y = elem_decode(elem, codes[r * cols + c]) * scales[(r / gr) * ncg + c / gc];
      out[r * cols + c] = std::isnan(y) ? f32_from_bits(kCanonicalNan) : y;
    }
}

void bf16_encode(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}
void bf16_round(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace

const QuantKernels kScalarKernels = {mx_quant_row, mx_quant_col, mx_dequant_row, mx_dequant_col, group_amax,
                                     group_encode, group_decode, bf16_encode,    bf16_round};

}  // namespace mxrl::detail
