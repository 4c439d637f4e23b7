#include "learner/linear_grad.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/transpose/transpose.h"
#include "model/precision.h"
#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
// A scratch buffer left uninitialized: every element is written before it is
// read (transpose writes the padding too), so the zero-fill of a vector would
// be wasted work on every call.
std::unique_ptr<float[]> scratch(int64_t n) { return std::unique_ptr<float[]>(new float[static_cast<size_t>(n)]); }

const PrecisionTraits& trainable(const LinearPrecision& prec) {
  const PrecisionTraits& t = precision_traits(prec.precision);
  if (!t.trainable) fail("no backward for {}", prec.str());
  return t;
}
}  // namespace

PackedWeight prepare_dgrad_weight(const std::string& name, const float* w, int64_t n, int64_t k,
                                  const LinearPrecision& prec, const Exec& exec) {
  const PrecisionTraits& t = precision_traits(prec.precision);
  if (!t.trainable) fail("{}: the learner trains fp32, bf16 and mxfp8 linears, not {}", name, prec.str());
  if (t.needs_k32 && n % kMxBlock != 0)
    fail("{}: out features ({}) must be a multiple of {} for the MX dgrad (W col blocks)", name, n, kMxBlock);
  if (t.wformat == WFormat::F32) return t.pack_operand(prec, w, n, n, k, exec);
  std::vector<float> compute(n * k);  // the compute copy
  bf16_round(w, n * k, compute.data(), exec);
  return t.pack_operand(prec, compute.data(), n, n, k, exec);
}

void linear_dgrad(const LinearPrecision& prec, ElemType grad_elem, const PackedWeight& wt, const float* dy, int64_t m,
                  float* dx, bool accumulate, const Exec& exec) {
  const int64_t n = wt.k(), k = wt.n();
  if (m == 0) return;
  const PrecisionTraits& t = trainable(prec);
  std::unique_ptr<float[]> g;
  const float* a = dy;
  if (t.wformat != WFormat::F32 && !t.gemm_rounds_x) {  // fp32 multiplies dY as it is; bf16's rounding is the GEMM's
    PhaseTimer timer(exec.times, Phase::ActQuant);
    g = scratch(m * n);
    t.round_grad(prec, grad_elem, dy, g.get(), m, n, exec);
    a = g.get();
  }
  PhaseTimer timer(exec.times, Phase::Gemm);
  if (!accumulate) {
    gemm(a, m, wt, dx, exec);
    return;
  }
  const auto tmp = scratch(m * k);
  gemm(a, m, wt, tmp.get(), exec);
  for (int64_t i = 0; i < m * k; ++i) dx[i] = dx[i] + tmp[i];
}

namespace {
int64_t wgrad_rows(const PrecisionTraits& t, int64_t m) {
  return t.needs_k32 ? (m + kMxBlock - 1) / kMxBlock * kMxBlock : m;  // MX col blocks pad M
}
}  // namespace

PackedWeight wgrad_operand(const LinearPrecision& prec, const float* x, int64_t m, int64_t k, const Exec& exec) {
  const PrecisionTraits& t = trainable(prec);
  PhaseTimer timer(exec.times, Phase::ActQuant);
  return t.pack_operand(prec, x, m, wgrad_rows(t, m), k, exec);  // X^T, packed from X
}

void linear_wgrad(const LinearPrecision& prec, ElemType grad_elem, const float* dy, const PackedWeight& xp, int64_t m,
                  int64_t n, float* dw, const Exec& exec) {
  if (m == 0) return;
  const PrecisionTraits& t = trainable(prec);
  const int64_t mp = wgrad_rows(t, m), k = xp.n();
  if (xp.k() != mp) fail("linear_wgrad: the X operand has {} rows, not {}", xp.k(), mp);
  const auto a = scratch(n * mp), out = scratch(n * k);
  transpose(dy, m, n, mp, a.get(), exec);
  if (!t.gemm_rounds_x) {
    PhaseTimer timer(exec.times, Phase::ActQuant);
    t.round_grad(prec, grad_elem, a.get(), a.get(), n, mp, exec);
  }
  {
    PhaseTimer timer(exec.times, Phase::Gemm);
    gemm(a.get(), n, xp, out.get(), exec);
  }
  for (int64_t i = 0; i < n * k; ++i) dw[i] = dw[i] + out[i];
}

void linear_wgrad(const LinearPrecision& prec, ElemType grad_elem, const float* dy, const float* x, int64_t m,
                  int64_t n, int64_t k, float* dw, const Exec& exec) {
  if (m == 0) return;
  linear_wgrad(prec, grad_elem, dy, wgrad_operand(prec, x, m, k, exec), m, n, dw, exec);
}

}  // namespace mxrl
