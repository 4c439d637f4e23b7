// Scalar GEMM backend over the packed layout: plain loops and std::fma, in the
// contract's order (the pair chain for BF16 and MX weights). Slow; it checks the
// packing and is the fallback on CPUs without AVX2 + FMA.
#include <cmath>
#include <vector>

#include "kernels/gemm/gemm.h"

namespace mxrl::detail {
namespace {
constexpr int kPanel = PackedWeight::kPanel;
}  // namespace

void panel_values(const PackedWeight& w, int64_t p, std::vector<float>& out) {
  const int64_t K = w.k();
  out.resize(static_cast<size_t>(K * kPanel));
  switch (w.format()) {
    case WFormat::F32: {
      const auto* s = static_cast<const float*>(w.panel_data(p));
      for (int64_t i = 0; i < K * kPanel; ++i) out[i] = s[i];
      return;
    }
    case WFormat::BF16: {
      const auto* s = static_cast<const uint16_t*>(w.panel_data(p));
      for (int64_t k = 0; k < K; ++k)
        for (int j = 0; j < kPanel; ++j)
          out[k * kPanel + j] = bf16_to_f32(s[k * kPanel + (j < 16 ? 2 * j : 2 * (j - 16) + 1)]);
      return;
    }
    case WFormat::MX:
    case WFormat::FP8: {
      float table[256];
      for (int c = 0; c < 256; ++c) table[c] = elem_decode(w.elem(), static_cast<uint8_t>(c));
      const auto* codes = static_cast<const uint8_t*>(w.panel_data(p));
      const int fold_exp = 127 - elem_traits(w.elem()).bias;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t g = k / w.group_k();
        for (int j = 0; j < kPanel; ++j) {
          float s;
          if (w.format() == WFormat::MX) {
            s = e8m0_to_f32(w.panel_mx_scales(p)[g * kPanel + j]);
          } else {
            s = w.panel_fp8_scales(p)[g * kPanel + j];
            if (w.panel_fast(p)) s = std::ldexp(s, -fold_exp);  // stored folded; exact both ways
          }
          const uint8_t code = codes[k * kPanel + (j < 16 ? 2 * j : 2 * (j - 16) + 1)];
          out[k * kPanel + j] = table[code] * s;  // exact decode, one rounding
        }
      }
      return;
    }
  }
}

namespace {
void run(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t N = w.n(), K = w.k();
  const bool pairs = pair_contract(w.format());
  std::vector<float> wp, xb(static_cast<size_t>(K + 1), 0.0f);
  for (int64_t p = p0; p < p1; ++p) {
    panel_values(w, p, wp);
    if (pairs)
      for (float& v : wp) v = bf16_dot_daz(v);
    const int64_t cols = std::min<int64_t>(kPanel, N - p * kPanel);
    for (int64_t m = m0; m < m1; ++m) {
      const float* xr = x + m * K;
      if (pairs)
        for (int64_t k = 0; k < K; ++k) xb[k] = bf16_dot_round(xr[k]);
      for (int64_t j = 0; j < cols; ++j) {
        float acc = 0.0f;
        if (pairs) {  // odd element first; a missing last one is 0 * 0
          for (int64_t k = 0; k < K; k += 2) {
            acc = bf16_dot_step(acc, k + 1 < K ? xb[k + 1] : 0.0f, k + 1 < K ? wp[(k + 1) * kPanel + j] : 0.0f);
            acc = bf16_dot_step(acc, xb[k], wp[k * kPanel + j]);
          }
        } else {
          for (int64_t k = 0; k < K; ++k) acc = std::fma(xr[k], wp[k * kPanel + j], acc);
        }
        y[m * N + p * kPanel + j] = std::isnan(acc) ? f32_from_bits(kGemmNan) : acc;
      }
    }
  }
}
}  // namespace

const GemmKernels kGemmScalar = {run, 64, 1};

}  // namespace mxrl::detail
