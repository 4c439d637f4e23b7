// The backward GEMMs of each recipe against an independent construction:
// the operands quantized with mx_quantize along the axis that docs/reference.md §4
// names (Axis::Col for "col"), dequantized, and multiplied by plain loops in
// the GEMM contract's order (sequential FMAs, or the BF16 pair chain). Bitwise.
#include <gtest/gtest.h>

#include <cmath>

#include "learner/linear_grad.h"

#include "kernels/gemm/gemm.h"
#include "numerics/formats.h"
#include "testing/random.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

using test::randn;

// a[rows, cols] on the grid: dequant(quant(a)) with blocks along `axis`.
std::vector<float> on_grid(const std::vector<float>& a, int64_t rows, int64_t cols, const LinearPrecision& p,
                           ElemType elem, Axis axis) {
  std::vector<float> out(a);
  if (p.precision == Precision::BF16)
    for (float& x : out) x = bf16_to_f32(f32_to_bf16(x));
  if (p.precision == Precision::MXFP8) {
    std::vector<uint8_t> codes(rows * cols), scales(mx_num_scales(rows, cols, axis));
    const MxConfig cfg{elem, p.rule, axis, Rounding::RNE, 0};
    mx_quantize(a.data(), InType::F32, rows, cols, cfg, codes.data(), scales.data());
    mx_dequantize(codes.data(), scales.data(), rows, cols, elem, axis, out.data());
  }
  return out;
}

std::vector<float> bf16_copy(const std::vector<float>& w) {
  std::vector<float> o(w);
  for (float& x : o) x = bf16_to_f32(f32_to_bf16(x));
  return o;
}

class LinearGrad : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

LinearPrecision precision_of(const std::string& s) {
  if (s == "fp32") return {Precision::FP32};
  if (s == "bf16") return {Precision::BF16};
  if (s == "mxfp8-floor") return {Precision::MXFP8, ElemType::E4M3, ScaleRule::Floor};
  return {Precision::MXFP8, ElemType::E4M3, ScaleRule::RCeil};
}

TEST_P(LinearGrad, DgradAndWgradMatchTheBriefsOperands) {
  const auto [name, hybrid] = GetParam();
  const LinearPrecision p = precision_of(name);
  const ElemType ge = hybrid ? ElemType::E5M2 : ElemType::E4M3;
  const int64_t m = 45, n = 64, k = 96;  // m not a multiple of 32: wgrad pads
  const auto w = randn(n * k, 1, 0.05f), x = randn(m * k, 2, 1.0f), dy = randn(m * n, 3, 1e-3f);
  ThreadPool pool(3);
  const Exec exec{&pool};
  const PackedWeight wt = prepare_dgrad_weight("w", w.data(), n, k, p, exec);

  // dgrad: dY row (blocks along N) x W col (blocks along N) of the compute copy.
  const auto dyq = on_grid(dy, m, n, p, ge, Axis::Row);
  const auto wq = on_grid(p.precision == Precision::FP32 ? w : bf16_copy(w), n, k, p, p.elem, Axis::Col);
  std::vector<float> dx(m * k, 0.5f);
  linear_dgrad(p, ge, wt, dy.data(), m, dx.data(), /*accumulate=*/true, exec);
  // The GEMM contract's chain (gemm.h): sequential FMAs for fp32, the BF16
  // pair chain (odd element first, DAZ/FTZ) for the BF16 and MX operands.
  const bool pairs = p.precision != Precision::FP32;
  auto chain = [&](auto&& a, auto&& b, int64_t len) {
    float acc = 0.0f;
    if (!pairs) {
      for (int64_t j = 0; j < len; ++j) acc = std::fma(a(j), b(j), acc);
      return acc;
    }
    for (int64_t j = 0; j < len; j += 2) {
      if (j + 1 < len)
        acc = detail::bf16_dot_step(acc, a(j + 1), b(j + 1));
      else
        acc = detail::bf16_dot_step(acc, 0.0f, 0.0f);
      acc = detail::bf16_dot_step(acc, a(j), b(j));
    }
    return acc;
  };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) {
      const float acc = chain([&](int64_t j) { return dyq[i * n + j]; }, [&](int64_t j) { return wq[j * k + c]; }, n);
      ASSERT_EQ(f32_bits(0.5f + acc), f32_bits(dx[i * k + c])) << name << " dx " << i << "," << c;
    }

  // wgrad: dY col x X col (blocks along M, zero-padded to a multiple of 32).
  const int64_t mp = p.precision == Precision::MXFP8 ? 64 : m;
  std::vector<float> dyp(mp * n, 0.0f), xp(mp * k, 0.0f);
  std::copy(dy.begin(), dy.end(), dyp.begin());
  std::copy(x.begin(), x.end(), xp.begin());
  const auto dyc = on_grid(dyp, mp, n, p, ge, Axis::Col), xc = on_grid(xp, mp, k, p, p.elem, Axis::Col);
  std::vector<float> dw(n * k, -0.25f);
  linear_wgrad(p, ge, dy.data(), x.data(), m, n, k, dw.data(), exec);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) {
      const float acc = chain([&](int64_t i) { return dyc[i * n + j]; }, [&](int64_t i) { return xc[i * k + c]; }, mp);
      ASSERT_EQ(f32_bits(-0.25f + acc), f32_bits(dw[j * k + c])) << name << " dw " << j << "," << c;
    }
}

INSTANTIATE_TEST_SUITE_P(Recipes, LinearGrad,
                         ::testing::Values(std::make_tuple("fp32", false), std::make_tuple("bf16", false),
                                           std::make_tuple("mxfp8", false), std::make_tuple("mxfp8", true),
                                           std::make_tuple("mxfp8-floor", false)));

TEST(LinearGrad, HybridGradientsDifferFromE4M3) {
  const LinearPrecision p{Precision::MXFP8};
  const int64_t m = 32, n = 32, k = 32;
  const auto w = randn(n * k, 4, 0.05f), dy = randn(m * n, 5, 1.0f);
  const PackedWeight wt = prepare_dgrad_weight("w", w.data(), n, k, p, {});
  std::vector<float> a(m * k), b(m * k);
  linear_dgrad(p, ElemType::E4M3, wt, dy.data(), m, a.data(), false, {});
  linear_dgrad(p, ElemType::E5M2, wt, dy.data(), m, b.data(), false, {});
  EXPECT_NE(a, b);
}

TEST(LinearGrad, RejectsShapesAndPrecisionsWithoutABackward) {
  const std::vector<float> w(40 * 32, 0.1f);
  EXPECT_THROW(prepare_dgrad_weight("w", w.data(), 40, 32, {Precision::MXFP8}, {}), Error);  // N % 32
  EXPECT_THROW(prepare_dgrad_weight("w", w.data(), 40, 32, {Precision::FP8Tensor}, {}), Error);
}

}  // namespace
}  // namespace mxrl
