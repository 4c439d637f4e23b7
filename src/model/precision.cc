#include "model/precision.h"

#include <algorithm>
#include <cstring>

#include "io/elem_dtype.h"
#include "model/linear.h"
#include "numerics/bf16.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"
#include "util/error.h"

namespace mxrl {

namespace {

std::vector<uint16_t> to_bf16(const float* w, int64_t n, const Exec& exec) {
  std::vector<uint16_t> b(n);
  bf16_encode(w, n, b.data(), exec);
  return b;
}

template <typename T>
HeldPart part(const char* name, DType dtype, std::vector<int64_t> shape, const std::vector<T>& v) {
  return {name, dtype, std::move(shape), v.data(), static_cast<int64_t>(v.size() * sizeof(T))};
}

MxConfig row_blocks(ElemType elem, ScaleRule rule) { return {elem, rule, Axis::Row, Rounding::RNE, 0}; }

// ---- fp32: the FP32 master itself ----
HeldSizes f32_sizes(int64_t n, int64_t k) { return {.f32 = n * k}; }
void f32_prepare(PreparedLinear& L, const float* w, const Exec&) { L.f32.assign(w, w + L.n * L.k); }
void f32_view(const PreparedLinear& L, WeightView& v) { v.data = L.f32.data(); }
void f32_activations(const float* x, int64_t m, int64_t k, const LinearPrecision&, float* out, const Exec&) {
  std::memcpy(out, x, m * k * sizeof(float));
}
// a[rows, cols] with zero rows up to rows_padded: a itself, or a copy in `own`.
const float* zero_padded(const float* a, int64_t rows, int64_t rows_padded, int64_t cols, std::vector<float>& own) {
  if (rows_padded == rows) return a;
  own.assign(static_cast<size_t>(rows_padded * cols), 0.0f);
  std::memcpy(own.data(), a, static_cast<size_t>(rows * cols) * sizeof(float));
  return own.data();
}

PackedWeight f32_pack(const LinearPrecision&, const float* a, int64_t rows, int64_t rows_padded, int64_t cols,
                      const Exec& exec) {
  std::vector<float> own;
  return PackedWeight::pack_transposed({WFormat::F32, rows_padded, cols, zero_padded(a, rows, rows_padded, cols, own)},
                                       exec);
}
void f32_round_grad(const LinearPrecision&, ElemType, const float* a, float* out, int64_t rows, int64_t cols,
                    const Exec&) {
  if (out != a) std::memcpy(out, a, static_cast<size_t>(rows * cols) * sizeof(float));
}
std::vector<HeldPart> f32_parts(const PreparedLinear& L) { return {part("f32", DType::F32, {L.n, L.k}, L.f32)}; }

// ---- bf16: the BF16 compute copy ----
HeldSizes bf16_sizes(int64_t n, int64_t k) { return {.bf16 = n * k}; }
void bf16_prepare(PreparedLinear& L, const float* w, const Exec& exec) { L.bf16 = to_bf16(w, L.n * L.k, exec); }
void bf16_view(const PreparedLinear& L, WeightView& v) { v.data = L.bf16.data(); }
void bf16_activations(const float* x, int64_t m, int64_t k, const LinearPrecision&, float* out, const Exec& exec) {
  bf16_round(x, m * k, out, exec);
}
PackedWeight bf16_pack(const LinearPrecision&, const float* a, int64_t rows, int64_t rows_padded, int64_t cols,
                       const Exec& exec) {
  std::vector<uint16_t> bf(static_cast<size_t>(rows_padded * cols), 0);  // BF16 +0 past `rows`
  bf16_encode(a, rows * cols, bf.data(), exec);
  return PackedWeight::pack_transposed({WFormat::BF16, rows_padded, cols, bf.data()}, exec);
}
void bf16_round_grad(const LinearPrecision&, ElemType, const float* a, float* out, int64_t rows, int64_t cols,
                     const Exec& exec) {
  bf16_round(a, rows * cols, out, exec);
}
std::vector<HeldPart> bf16_parts(const PreparedLinear& L) { return {part("bf16", DType::BF16, {L.n, L.k}, L.bf16)}; }

// ---- mxfp8: MX codes + E8M0 scales of the compute copy's 1x32 row blocks ----
HeldSizes mx_sizes(int64_t n, int64_t k) { return {.codes = n * k, .mx_scales = mx_num_scales(n, k, Axis::Row)}; }
void mx_prepare(PreparedLinear& L, const float* w, const Exec& exec) {
  L.codes.resize(L.n * L.k);
  L.mx_scales.resize(mx_num_scales(L.n, L.k, Axis::Row));
  // The BF16 compute copy's codes, each weight rounded to BF16 as the
  // quantizer reads it (InType::F32AsBF16): one pass, no BF16 temporary.
  mx_quantize(w, InType::F32AsBF16, L.n, L.k, row_blocks(L.prec.elem, L.prec.rule), L.codes.data(), L.mx_scales.data(),
              exec);
}
void mx_view(const PreparedLinear& L, WeightView& v) {
  v.data = L.codes.data();
  v.mx_scales = L.mx_scales.data();
}
void mx_activations(const float* x, int64_t m, int64_t k, const LinearPrecision& p, float* out, const Exec& exec) {
  mx_round_trip_rows(x, m, k, row_blocks(p.elem, p.rule), out, exec);
}
// A's column blocks (32 x 1 along its rows) are A^T's row blocks, the MX
// weight layout along K.
PackedWeight mx_pack(const LinearPrecision& p, const float* a, int64_t rows, int64_t rows_padded, int64_t cols,
                     const Exec& exec) {
  std::vector<float> own;
  const float* ap = zero_padded(a, rows, rows_padded, cols, own);
  std::vector<uint8_t> codes(rows_padded * cols), scales(mx_num_scales(rows_padded, cols, Axis::Col));
  const MxConfig col_blocks{p.elem, p.rule, Axis::Col, Rounding::RNE, 0};
  mx_quantize(ap, InType::F32, rows_padded, cols, col_blocks, codes.data(), scales.data(), exec);
  WeightView v{WFormat::MX, rows_padded, cols, codes.data(), scales.data()};
  v.elem = p.elem;
  return PackedWeight::pack_transposed(v, exec);
}
void mx_round_grad(const LinearPrecision& p, ElemType grad_elem, const float* a, float* out, int64_t rows, int64_t cols,
                   const Exec& exec) {
  mx_round_trip_rows(a, rows, cols, row_blocks(grad_elem, p.rule), out, exec);
}
std::vector<HeldPart> mx_parts(const PreparedLinear& L) {
  return {part("codes", code_dtype(L.prec.elem), {L.n, L.k}, L.codes),
          part("scales", DType::F8_E8M0, {L.n, L.k / kMxBlock}, L.mx_scales)};
}

// ---- fp8-tensor / fp8-block128: FP8 codes + FP32 scales of the compute copy ----
template <Precision P>
Fp8Grid weight_grid(int64_t n, int64_t k) {
  return P == Precision::FP8Tensor ? Fp8Grid::per_tensor(n, k) : Fp8Grid::block128_weight();
}
template <Precision P>
Fp8Grid activation_grid(int64_t k) {
  return P == Precision::FP8Tensor ? Fp8Grid::per_token(k) : Fp8Grid::block128_act();
}
template <Precision P>
HeldSizes fp8_sizes(int64_t n, int64_t k) {
  return {.codes = n * k, .fp8_scales = fp8_num_scales(n, k, weight_grid<P>(n, k))};
}
template <Precision P>
void fp8_prepare(PreparedLinear& L, const float* w, const Exec& exec) {
  const Fp8Grid g = weight_grid<P>(L.n, L.k);
  L.codes.resize(L.n * L.k);
  L.fp8_scales.resize(fp8_num_scales(L.n, L.k, g));
  // The BF16 compute copy's codes (InType::F32AsBF16, as mx_prepare).
  fp8_quantize(w, InType::F32AsBF16, L.n, L.k, g, L.prec.elem, L.codes.data(), L.fp8_scales.data(), exec);
}
template <Precision P>
void fp8_view(const PreparedLinear& L, WeightView& v) {
  v.data = L.codes.data();
  v.fp8_scales = L.fp8_scales.data();
  v.fp8_grid = weight_grid<P>(L.n, L.k);
}
template <Precision P>
void fp8_activations(const float* x, int64_t m, int64_t k, const LinearPrecision& p, float* out, const Exec& exec) {
  const Fp8Grid g = activation_grid<P>(k);
  std::vector<uint8_t> codes(m * k);
  std::vector<float> scales(fp8_num_scales(m, k, g));
  fp8_quantize(x, InType::F32, m, k, g, p.elem, codes.data(), scales.data(), exec);
  fp8_dequantize(codes.data(), scales.data(), m, k, g, p.elem, out, exec);
}
template <Precision P>
std::vector<HeldPart> fp8_parts(const PreparedLinear& L) {
  const Fp8Grid g = weight_grid<P>(L.n, L.k);
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  return {part("codes", code_dtype(L.prec.elem), {L.n, L.k}, L.codes),
          part("scales", DType::F32, {ceil_div(L.n, g.group_rows), ceil_div(L.k, g.group_cols)}, L.fp8_scales)};
}

// Indexed by Precision.
const PrecisionTraits kTraits[] = {
    {Precision::FP32, "fp32", WFormat::F32, false, true, false, f32_sizes, f32_prepare, f32_view, f32_activations,
     f32_pack, f32_round_grad, f32_parts},
    {Precision::BF16, "bf16", WFormat::BF16, false, true, true, bf16_sizes, bf16_prepare, bf16_view, bf16_activations,
     bf16_pack, bf16_round_grad, bf16_parts},
    {Precision::MXFP8, "mxfp8", WFormat::MX, true, true, false, mx_sizes, mx_prepare, mx_view, mx_activations, mx_pack,
     mx_round_grad, mx_parts},
    {Precision::FP8Tensor, "fp8-tensor", WFormat::FP8, false, false, false, fp8_sizes<Precision::FP8Tensor>,
     fp8_prepare<Precision::FP8Tensor>, fp8_view<Precision::FP8Tensor>, fp8_activations<Precision::FP8Tensor>, nullptr,
     nullptr, fp8_parts<Precision::FP8Tensor>},
    {Precision::FP8Block128, "fp8-block128", WFormat::FP8, false, false, false, fp8_sizes<Precision::FP8Block128>,
     fp8_prepare<Precision::FP8Block128>, fp8_view<Precision::FP8Block128>, fp8_activations<Precision::FP8Block128>,
     nullptr, nullptr, fp8_parts<Precision::FP8Block128>},
};

}  // namespace

const PrecisionTraits& precision_traits(Precision p) {
  const auto i = static_cast<size_t>(p);
  if (i >= std::size(kTraits) || kTraits[i].precision != p) fail("precision_traits: unknown precision {}", i);
  return kTraits[i];
}

}  // namespace mxrl
