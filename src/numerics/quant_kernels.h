// The kernel table behind mx.h and fp8_grid.h: one entry per backend, each a
// set of range kernels that the public functions split over threads. Ranges
// are given against the whole tensor so stochastic-rounding counters are
// global element indices.
#pragma once
#include <cstdint>
#include <type_traits>

#include "numerics/mx.h"

namespace mxrl::detail {

struct QuantKernels {
  // MX, Axis::Row: rows [r0, r1).
  void (*mx_quant_row)(const void* x, InType in, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg,
                       uint8_t* codes, uint8_t* scales);
  // MX, Axis::Col: 32-row groups [g0, g1) x columns [c0, c1).
  void (*mx_quant_col)(const void* x, InType in, int64_t cols, int64_t g0, int64_t g1, int64_t c0, int64_t c1,
                       const MxConfig& cfg, uint8_t* codes, uint8_t* scales);
  void (*mx_dequant_row)(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t r0, int64_t r1,
                         ElemType elem, float* out);
  void (*mx_dequant_col)(const uint8_t* codes, const uint8_t* scales, int64_t cols, int64_t g0, int64_t g1, int64_t c0,
                         int64_t c1, ElemType elem, float* out);
  // FP8 group grid: per-row, per-column-group max |x| as FP32 bits
  // (amax[r][cg], NaN > Inf > finite) for rows [r0, r1).
  void (*group_amax)(const void* x, InType in, int64_t cols, int64_t gc, int64_t r0, int64_t r1, uint32_t* amax);
  // codes for rows [r0, r1) given the per-group scales [ceil(rows/gr)][ceil(cols/gc)].
  void (*group_encode)(const void* x, InType in, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1,
                       ElemType elem, const float* scales, uint8_t* codes);
  void (*group_decode)(const uint8_t* codes, int64_t cols, int64_t gr, int64_t gc, int64_t r0, int64_t r1,
                       ElemType elem, const float* scales, float* out);
  // BF16 (bf16.h): out[i] = f32_to_bf16(x[i]), and its widening back, for i < n.
  void (*bf16_encode)(const float* x, int64_t n, uint16_t* out);
  void (*bf16_round)(const float* x, int64_t n, float* out);
  // mx_dequant_row(mx_quant_row(x)) for FP32 rows [r0, r1) and RNE (cfg.round
  // must be Rounding::RNE) in one pass, without codes. Null where the backend
  // has none: mx.cc composes the two kernels then, and for stochastic
  // rounding.
  void (*mx_round_trip_row)(const float* x, int64_t cols, int64_t r0, int64_t r1, const MxConfig& cfg,
                            float* out) = nullptr;
};

extern const QuantKernels kScalarKernels;
#if defined(__x86_64__)
extern const QuantKernels kAvx512Kernels;
// Backend::Avx2: MX quantization and dequantization and BF16 rounding on
// AVX2, the FP8 group grids kScalarKernels' (quant_avx2.cc).
extern const QuantKernels kAvx2Kernels;
#endif
const QuantKernels& quant_kernels(Backend b);  // b resolved with resolve_backend

// Shared by every backend: the quantum exponent of a magnitude for SR.
inline uint32_t abs_bits(uint32_t u) { return u & 0x7FFFFFFFu; }
inline constexpr uint32_t kInfBits = 0x7F800000u;
inline constexpr uint32_t kCanonicalNan = 0x7FC00000u;

// f(std::integral_constant<InType, in>{}) for the run-time input type in: a
// kernel templated on its input type is instantiated for each and chosen once
// per call, so that the widening folds into its loops.
template <typename F>
decltype(auto) with_in_type(InType in, F&& f) {
  switch (in) {
    case InType::F32: return f(std::integral_constant<InType, InType::F32>{});
    case InType::BF16: return f(std::integral_constant<InType, InType::BF16>{});
    case InType::F16: return f(std::integral_constant<InType, InType::F16>{});
    case InType::F32AsBF16: break;
  }
  return f(std::integral_constant<InType, InType::F32AsBF16>{});
}

}  // namespace mxrl::detail
