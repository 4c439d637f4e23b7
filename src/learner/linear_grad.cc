#include "learner/linear_grad.h"

#include <algorithm>
#include <vector>

#include "kernels/transpose.h"
#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
// A [rows, cols] FP32 matrix packed as a GEMM weight in the layer's format:
// FP32, BF16 bits, or MX codes of its row blocks.
PackedWeight pack_as(const LinearPrecision& prec, const float* a, int64_t rows, int64_t cols, const Exec& exec) {
  WeightView v;
  v.n = rows;
  v.k = cols;
  std::vector<uint16_t> bf;
  std::vector<uint8_t> codes, scales;
  switch (prec.precision) {
    case Precision::FP32: v.fmt = WFormat::F32, v.data = a; break;
    case Precision::BF16:
      bf.resize(rows * cols);
      bf16_encode(a, rows * cols, bf.data(), exec);
      v.fmt = WFormat::BF16, v.data = bf.data();
      break;
    case Precision::MXFP8: {
      codes.resize(rows * cols), scales.resize(mx_num_scales(rows, cols, Axis::Row));
      const MxConfig cfg{prec.elem, prec.rule, Axis::Row, Rounding::RNE, 0};
      mx_quantize(a, InType::F32, rows, cols, cfg, codes.data(), scales.data(), exec);
      v.fmt = WFormat::MX, v.data = codes.data(), v.mx_scales = scales.data(), v.elem = prec.elem;
      break;
    }
    default: fail("no backward for {}", prec.str());
  }
  return PackedWeight::pack(v, exec);
}

// The gradient operand (dY or dY^T) on the layer's grid, in place.
void round_grad(const LinearPrecision& prec, ElemType grad_elem, float* a, int64_t rows, int64_t cols,
                const Exec& exec) {
  if (prec.precision == Precision::BF16) bf16_round(a, rows * cols, a, exec);
  if (prec.precision == Precision::MXFP8)
    mx_round_trip_rows(a, rows, cols, {grad_elem, prec.rule, Axis::Row, Rounding::RNE, 0}, a, exec);
}
}  // namespace

PackedWeight prepare_dgrad_weight(const std::string& name, const float* w, int64_t n, int64_t k,
                                  const LinearPrecision& prec, const Exec& exec) {
  if (prec.precision != Precision::FP32 && prec.precision != Precision::BF16 && prec.precision != Precision::MXFP8)
    fail("{}: the learner trains fp32, bf16 and mxfp8 linears, not {}", name, prec.str());
  if (prec.precision == Precision::MXFP8 && n % kMxBlock != 0)
    fail("{}: out features ({}) must be a multiple of {} for the MX dgrad (W col blocks)", name, n, kMxBlock);
  std::vector<float> wt(k * n);
  transpose(w, n, k, n, wt.data(), exec);
  if (prec.precision != Precision::FP32) bf16_round(wt.data(), k * n, wt.data(), exec);  // the compute copy
  return pack_as(prec, wt.data(), k, n, exec);
}

void linear_dgrad(const LinearPrecision& prec, ElemType grad_elem, const PackedWeight& wt, const float* dy, int64_t m,
                  float* dx, bool accumulate, const Exec& exec) {
  const int64_t n = wt.k(), k = wt.n();
  if (m == 0) return;
  std::vector<float> g;
  const float* a = dy;
  if (prec.precision != Precision::FP32) {
    PhaseTimer t(exec.times, Phase::ActQuant);
    g.assign(dy, dy + m * n);
    round_grad(prec, grad_elem, g.data(), m, n, exec);
    a = g.data();
  }
  PhaseTimer t(exec.times, Phase::Gemm);
  if (!accumulate) {
    gemm(a, m, wt, dx, exec);
    return;
  }
  std::vector<float> tmp(m * k);
  gemm(a, m, wt, tmp.data(), exec);
  for (int64_t i = 0; i < m * k; ++i) dx[i] = dx[i] + tmp[i];
}

void linear_wgrad(const LinearPrecision& prec, ElemType grad_elem, const float* dy, const float* x, int64_t m,
                  int64_t n, int64_t k, float* dw, const Exec& exec) {
  if (m == 0) return;
  const int64_t mp = prec.precision == Precision::MXFP8 ? (m + kMxBlock - 1) / kMxBlock * kMxBlock : m;
  std::vector<float> a(n * mp), b(k * mp), out(n * k);
  transpose(dy, m, n, mp, a.data(), exec);
  transpose(x, m, k, mp, b.data(), exec);
  PackedWeight bp;
  {
    PhaseTimer t(exec.times, Phase::ActQuant);
    round_grad(prec, grad_elem, a.data(), n, mp, exec);
    bp = pack_as(prec, b.data(), k, mp, exec);
  }
  {
    PhaseTimer t(exec.times, Phase::Gemm);
    gemm(a.data(), n, bp, out.data(), exec);
  }
  for (int64_t i = 0; i < n * k; ++i) dw[i] = dw[i] + out[i];
}

}  // namespace mxrl
