#include "model/linear.h"

#include <cstring>

#include "model/precision.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

PreparedLinear PreparedLinear::prepare(const std::string& name, const float* w, int64_t n, int64_t k,
                                       const LinearPrecision& prec, const Exec& exec) {
  PreparedLinear L;
  L.name = name;
  L.prec = prec;
  L.n = n;
  L.k = k;
  const PrecisionTraits& t = precision_traits(prec.precision);
  if (t.needs_k32 && k % kMxBlock != 0)
    fail("{}: in features ({}) must be a multiple of {} for {}", name, k, kMxBlock, prec.str());
  t.prepare(L, w, exec);
  L.packed = PackedWeight::pack(L.view(), exec);
  return L;
}

PreparedLinear PreparedLinear::payload() const {
  PreparedLinear p;
  p.name = name;
  p.prec = prec;
  p.n = n;
  p.k = k;
  p.f32 = f32;
  p.bf16 = bf16;
  p.codes = codes;
  p.mx_scales = mx_scales;
  p.fp8_scales = fp8_scales;
  return p;
}

void PreparedLinear::validate_and_pack(const Exec& exec) {
  auto expect = [&](const char* part, size_t got, size_t want) {
    if (got != want)
      fail("{}: {} holds {} values, {} as {} [{}, {}] needs {}", name, part, got, name, prec.str(), n, k, want);
  };
  const PrecisionTraits& t = precision_traits(prec.precision);
  const HeldSizes want = t.held_sizes(n, k);
  expect("f32", f32.size(), static_cast<size_t>(want.f32));
  expect("bf16", bf16.size(), static_cast<size_t>(want.bf16));
  expect("codes", codes.size(), static_cast<size_t>(want.codes));
  if (t.needs_k32 && k % kMxBlock != 0)
    fail("{}: in features ({}) must be a multiple of {} for {}", name, k, kMxBlock, prec.str());
  expect("mx_scales", mx_scales.size(), static_cast<size_t>(want.mx_scales));
  expect("fp8_scales", fp8_scales.size(), static_cast<size_t>(want.fp8_scales));
  packed = PackedWeight::pack(view(), exec);  // also rejects codes outside the element width
}

WeightView PreparedLinear::view() const {
  WeightView v;
  v.n = n;
  v.k = k;
  v.elem = prec.elem;
  const PrecisionTraits& t = precision_traits(prec.precision);
  v.fmt = t.wformat;
  t.view(*this, v);
  return v;
}

void quantize_activations(const float* x, int64_t m, int64_t k, const LinearPrecision& prec, float* out,
                          const Exec& exec) {
  precision_traits(prec.precision).quantize_activations(x, m, k, prec, out, exec);
}

const float* PreparedLinear::gemm_input(const float* x, int64_t m, std::vector<float>& scratch, const Exec& exec,
                                        const ForwardOptions& fo) const {
  const PrecisionTraits& t = precision_traits(prec.precision);
  // fp32 multiplies x as it is; so does bf16, whose rounding the GEMM makes
  // itself (but not gemm_split_k, which multiplies its operands as given).
  if (t.wformat == WFormat::F32 || (t.gemm_rounds_x && fo.gemm_split_k <= 1)) return x;
  PhaseTimer timer(exec.times, Phase::ActQuant);
  scratch.resize(m * k);
  quantize_activations(x, m, k, prec, scratch.data(), exec);
  return scratch.data();
}

void PreparedLinear::multiply(const float* in, int64_t m, float* y, const Exec& exec, const ForwardOptions& fo) const {
  if (m == 0) return;
  PhaseTimer timer(exec.times, Phase::Gemm);
  if (fo.gemm_split_k > 1)
    gemm_split_k(in, m, view(), y, fo.gemm_split_k, exec.pool);
  else
    gemm(in, m, packed, y, exec);
}

void PreparedLinear::forward(const float* x, int64_t m, float* y, std::vector<float>& scratch, const Exec& exec,
                             const ForwardOptions& fo) const {
  if (m == 0) return;
  multiply(gemm_input(x, m, scratch, exec, fo), m, y, exec, fo);
}

}  // namespace mxrl
