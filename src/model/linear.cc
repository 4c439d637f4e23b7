#include "model/linear.h"

#include <cstring>

#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
std::vector<uint16_t> to_bf16(const float* w, int64_t n, const Exec& exec) {
  std::vector<uint16_t> b(n);
  bf16_encode(w, n, b.data(), exec);
  return b;
}

Fp8Grid weight_grid(Precision p, int64_t n, int64_t k) {
  return p == Precision::FP8Tensor ? Fp8Grid::per_tensor(n, k) : Fp8Grid::block128_weight();
}
Fp8Grid activation_grid(Precision p, int64_t k) {
  return p == Precision::FP8Tensor ? Fp8Grid::per_token(k) : Fp8Grid::block128_act();
}
}  // namespace

PreparedLinear PreparedLinear::prepare(const std::string& name, const float* w, int64_t n, int64_t k,
                                       const LinearPrecision& prec, const Exec& exec) {
  PreparedLinear L;
  L.name = name;
  L.prec = prec;
  L.n = n;
  L.k = k;
  switch (prec.precision) {
    case Precision::FP32: L.f32.assign(w, w + n * k); break;
    case Precision::BF16: L.bf16 = to_bf16(w, n * k, exec); break;
    case Precision::MXFP8: {
      if (k % kMxBlock != 0)
        fail("{}: in features ({}) must be a multiple of {} for {}", name, k, kMxBlock, prec.str());
      const auto compute = to_bf16(w, n * k, exec);
      L.codes.resize(n * k);
      L.mx_scales.resize(mx_num_scales(n, k, Axis::Row));
      const MxConfig cfg{prec.elem, prec.rule, Axis::Row, Rounding::RNE, 0};
      mx_quantize(compute.data(), InType::BF16, n, k, cfg, L.codes.data(), L.mx_scales.data(), exec);
      break;
    }
    case Precision::FP8Tensor:
    case Precision::FP8Block128: {
      const auto compute = to_bf16(w, n * k, exec);
      const Fp8Grid g = weight_grid(prec.precision, n, k);
      L.codes.resize(n * k);
      L.fp8_scales.resize(fp8_num_scales(n, k, g));
      fp8_quantize(compute.data(), InType::BF16, n, k, g, prec.elem, L.codes.data(), L.fp8_scales.data(), exec);
      break;
    }
  }
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
    if (got != want) fail("{}: {} holds {} values, {} as {} [{}, {}] needs {}", name, part, got, name, prec.str(), n, k, want);
  };
  const size_t nk = static_cast<size_t>(n * k);
  expect("f32", f32.size(), prec.precision == Precision::FP32 ? nk : 0);
  expect("bf16", bf16.size(), prec.precision == Precision::BF16 ? nk : 0);
  const bool coded = prec.precision == Precision::MXFP8 || prec.precision == Precision::FP8Tensor ||
                     prec.precision == Precision::FP8Block128;
  expect("codes", codes.size(), coded ? nk : 0);
  if (prec.precision == Precision::MXFP8 && k % kMxBlock != 0)
    fail("{}: in features ({}) must be a multiple of {} for {}", name, k, kMxBlock, prec.str());
  expect("mx_scales", mx_scales.size(),
         prec.precision == Precision::MXFP8 ? static_cast<size_t>(mx_num_scales(n, k, Axis::Row)) : 0);
  expect("fp8_scales", fp8_scales.size(),
         coded && prec.precision != Precision::MXFP8
             ? static_cast<size_t>(fp8_num_scales(n, k, weight_grid(prec.precision, n, k)))
             : 0);
  packed = PackedWeight::pack(view(), exec);  // also rejects codes outside the element width
}

WeightView PreparedLinear::view() const {
  WeightView v;
  v.n = n;
  v.k = k;
  v.elem = prec.elem;
  switch (prec.precision) {
    case Precision::FP32: v.fmt = WFormat::F32; v.data = f32.data(); break;
    case Precision::BF16: v.fmt = WFormat::BF16; v.data = bf16.data(); break;
    case Precision::MXFP8:
      v.fmt = WFormat::MX;
      v.data = codes.data();
      v.mx_scales = mx_scales.data();
      break;
    case Precision::FP8Tensor:
    case Precision::FP8Block128:
      v.fmt = WFormat::FP8;
      v.data = codes.data();
      v.fp8_scales = fp8_scales.data();
      v.fp8_grid = weight_grid(prec.precision, n, k);
      break;
  }
  return v;
}

void quantize_activations(const float* x, int64_t m, int64_t k, const LinearPrecision& prec, float* out,
                          const Exec& exec) {
  switch (prec.precision) {
    case Precision::FP32: std::memcpy(out, x, m * k * sizeof(float)); return;
    case Precision::BF16:
      bf16_round(x, m * k, out, exec);
      return;
    case Precision::MXFP8:
      mx_round_trip_rows(x, m, k, {prec.elem, prec.rule, Axis::Row, Rounding::RNE, 0}, out, exec);
      return;
    case Precision::FP8Tensor:
    case Precision::FP8Block128: {
      const Fp8Grid g = activation_grid(prec.precision, k);
      std::vector<uint8_t> codes(m * k);
      std::vector<float> scales(fp8_num_scales(m, k, g));
      fp8_quantize(x, InType::F32, m, k, g, prec.elem, codes.data(), scales.data(), exec);
      fp8_dequantize(codes.data(), scales.data(), m, k, g, prec.elem, out, exec);
      return;
    }
  }
}

void PreparedLinear::forward(const float* x, int64_t m, float* y, std::vector<float>& scratch,
                             const Exec& exec) const {
  if (m == 0) return;
  const float* in = x;
  if (prec.precision != Precision::FP32) {
    PhaseTimer t(exec.times, Phase::ActQuant);
    scratch.resize(m * k);
    quantize_activations(x, m, k, prec, scratch.data(), exec);
    in = scratch.data();
  }
  PhaseTimer t(exec.times, Phase::Gemm);
  gemm(in, m, packed, y, exec);
}

}  // namespace mxrl
