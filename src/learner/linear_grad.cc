#include "learner/linear_grad.h"

#include <algorithm>
#include <vector>

#include "kernels/transpose.h"
#include "model/precision.h"
#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
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
  std::vector<float> wt(k * n);
  transpose(w, n, k, n, wt.data(), exec);
  if (t.wformat != WFormat::F32) bf16_round(wt.data(), k * n, wt.data(), exec);  // the compute copy
  return t.pack_operand(prec, wt.data(), k, n, exec);
}

void linear_dgrad(const LinearPrecision& prec, ElemType grad_elem, const PackedWeight& wt, const float* dy, int64_t m,
                  float* dx, bool accumulate, const Exec& exec) {
  const int64_t n = wt.k(), k = wt.n();
  if (m == 0) return;
  const PrecisionTraits& t = trainable(prec);
  std::vector<float> g;
  const float* a = dy;
  if (t.wformat != WFormat::F32) {  // fp32 multiplies dY as it is
    PhaseTimer timer(exec.times, Phase::ActQuant);
    g.assign(dy, dy + m * n);
    t.round_grad(prec, grad_elem, g.data(), m, n, exec);
    a = g.data();
  }
  PhaseTimer timer(exec.times, Phase::Gemm);
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
  const PrecisionTraits& t = trainable(prec);
  const int64_t mp = t.needs_k32 ? (m + kMxBlock - 1) / kMxBlock * kMxBlock : m;  // MX col blocks pad M
  std::vector<float> a(n * mp), b(k * mp), out(n * k);
  transpose(dy, m, n, mp, a.data(), exec);
  transpose(x, m, k, mp, b.data(), exec);
  PackedWeight bp;
  {
    PhaseTimer timer(exec.times, Phase::ActQuant);
    t.round_grad(prec, grad_elem, a.data(), n, mp, exec);
    bp = t.pack_operand(prec, b.data(), k, mp, exec);
  }
  {
    PhaseTimer timer(exec.times, Phase::Gemm);
    gemm(a.data(), n, bp, out.data(), exec);
  }
  for (int64_t i = 0; i < n * k; ++i) dw[i] = dw[i] + out[i];
}

}  // namespace mxrl
