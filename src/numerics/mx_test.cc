// Semantics of MX quantization (run on the default backend; the backends are
// proven equal in quant_backends_test.cc).
#include "numerics/mx.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

struct Quantized {
  std::vector<uint8_t> codes, scales;
};

Quantized quant(const std::vector<float>& x, int64_t rows, int64_t cols, MxConfig cfg, ThreadPool* pool = nullptr) {
  Quantized q{std::vector<uint8_t>(x.size()), std::vector<uint8_t>(mx_num_scales(rows, cols, cfg.axis))};
  mx_quantize(x.data(), InType::F32, rows, cols, cfg, q.codes.data(), q.scales.data(), {pool});
  return q;
}

std::vector<float> dequant(const Quantized& q, int64_t rows, int64_t cols, ElemType e, Axis a) {
  std::vector<float> out(q.codes.size());
  mx_dequantize(q.codes.data(), q.scales.data(), rows, cols, e, a, out.data());
  return out;
}

uint8_t scale_of(float amax, ElemType e, ScaleRule r) { return mx_scale_byte(f32_bits(amax), e, r); }

TEST(MxScale, FloorIsExponentMinusEmaxClamped) {
  EXPECT_EQ(scale_of(1.0f, ElemType::E4M3, ScaleRule::Floor), 127 - 8);
  EXPECT_EQ(scale_of(448.0f, ElemType::E4M3, ScaleRule::Floor), 127);
  EXPECT_EQ(scale_of(511.0f, ElemType::E4M3, ScaleRule::Floor), 127);  // clips 511 -> 448
  EXPECT_EQ(scale_of(6.0f, ElemType::E2M1, ScaleRule::Floor), 127);
  EXPECT_EQ(scale_of(0.0f, ElemType::E4M3, ScaleRule::Floor), 0);
  EXPECT_EQ(scale_of(0x1p-140f, ElemType::E4M3, ScaleRule::Floor), 0);  // clamped at -127
  EXPECT_EQ(scale_of(std::numeric_limits<float>::max(), ElemType::E2M1, ScaleRule::Floor), 127 + 127 - 2);
}

TEST(MxScale, RceilNeverClipsTheBlockMax) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> expo(-120, 120);
  for (ElemType t : kAllElemTypes) {
    const float max = elem_traits(t).max_normal;
    for (int i = 0; i < 20000; ++i) {
      const float amax = static_cast<float>(std::exp2(expo(rng)));
      const int e = scale_of(amax, t, ScaleRule::RCeil) - 127;
      EXPECT_LE(std::ldexp(static_cast<double>(amax), -e), max) << amax;
      // ... and is the smallest such power of two but for the 1/max rounding
      // (an FP32-subnormal descale only tells 2^-127 from 2^-126).
      if (amax / max >= 0x1p-126f) {
        EXPECT_GT(std::ldexp(static_cast<double>(amax), -(e - 1)), max * (1 - 1e-6)) << amax;
      }
    }
  }
}

TEST(MxScale, RulesDifferOnlyAboveSignificand175) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<uint32_t> mant(0, 0x7FFFFF);
  std::uniform_int_distribution<uint32_t> expf(20, 230);
  const uint32_t m175 = 0x600000;  // significand 1.75
  for (int i = 0; i < 100000; ++i) {
    uint32_t m = mant(rng);
    if (i % 10 == 0) m = m175 + (i % 3) - 1;  // at and around 1.75
    const uint32_t bits = (expf(rng) << 23) | m;
    const int fl = mx_scale_byte(bits, ElemType::E4M3, ScaleRule::Floor);
    const int rc = mx_scale_byte(bits, ElemType::E4M3, ScaleRule::RCeil);
    EXPECT_EQ(rc - fl, m > m175 ? 1 : 0) << std::hex << bits;
  }
}

TEST(MxScale, RceilFp32SubnormalDescale) {
  // amax * (1/448) below 2^-126: byte is 1 above 2^-127, else 0.
  EXPECT_EQ(scale_of(0x1p-140f, ElemType::E4M3, ScaleRule::RCeil), 0);
  EXPECT_EQ(scale_of(448.0f * 0x1p-127f, ElemType::E4M3, ScaleRule::RCeil), 0);
  EXPECT_EQ(scale_of(449.0f * 0x1p-127f, ElemType::E4M3, ScaleRule::RCeil), 1);
  EXPECT_EQ(scale_of(0.0f, ElemType::E4M3, ScaleRule::RCeil), 0);
}

TEST(Mx, KnownBlock) {
  // 1..32 with amax 32: floor e = 5 - 8 = -3, so v = 8x on the E4M3 grid.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i + 1);
  const auto q = quant(x, 1, 32, {ElemType::E4M3, ScaleRule::Floor});
  EXPECT_EQ(q.scales[0], 127 - 3);
  const auto y = dequant(q, 1, 32, ElemType::E4M3, Axis::Row);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], x[i]);  // 8..128 exact on the grid
  EXPECT_EQ(y[16], 16.0f);                             // 17*8 = 136: tie between 128 and 144 -> even (128)
  EXPECT_EQ(y[17], 18.0f);                             // 144
  EXPECT_EQ(y[18], 20.0f);                             // 152: tie between 144 and 160 -> 160
}

TEST(Mx, SpecialBlocks) {
  std::vector<float> x(4 * 32, 0.0f);
  for (int i = 32; i < 64; ++i) x[i] = 1.0f;
  x[40] = std::numeric_limits<float>::quiet_NaN();
  for (int i = 64; i < 96; ++i) x[i] = 1.0f;
  x[70] = -std::numeric_limits<float>::infinity();
  for (int i = 96; i < 128; ++i) x[i] = -0.0f;
  const auto q = quant(x, 1, 128, {});
  EXPECT_EQ(q.scales[0], 0x00);
  EXPECT_EQ(q.scales[1], 0xFF);
  EXPECT_EQ(q.scales[2], 0xFF);
  EXPECT_EQ(q.scales[3], 0x00);
  for (int i = 0; i < 96; ++i) EXPECT_EQ(q.codes[i], 0) << i;
  const auto y = dequant(q, 1, 128, ElemType::E4M3, Axis::Row);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);
  for (int i = 32; i < 96; ++i) EXPECT_TRUE(std::isnan(y[i]));
  for (int i = 96; i < 128; ++i) EXPECT_TRUE(y[i] == 0.0f && std::signbit(y[i]));
}

TEST(Mx, Fp32SubnormalInputsAreNotFlushed) {
  std::vector<float> x(32, 0x1p-140f);
  x[1] = -0x1p-141f;
  const auto q = quant(x, 1, 32, {ElemType::E5M2, ScaleRule::Floor});
  EXPECT_EQ(q.scales[0], 0);  // e = -127
  const auto y = dequant(q, 1, 32, ElemType::E5M2, Axis::Row);
  EXPECT_EQ(y[0], 0x1p-140f);
  EXPECT_EQ(y[1], -0x1p-141f);
}

TEST(Mx, FloorSaturatesRceilDoesNot) {
  std::vector<float> x(32, 0.5f);
  x[0] = 1.9f * 256;  // significand 1.9 > 1.75
  const auto qf = quant(x, 1, 32, {ElemType::E4M3, ScaleRule::Floor});
  EXPECT_EQ(qf.codes[0], 0x7E);  // clipped to 448
  EXPECT_EQ(dequant(qf, 1, 32, ElemType::E4M3, Axis::Row)[0], 448.0f);
  const auto qr = quant(x, 1, 32, {ElemType::E4M3, ScaleRule::RCeil});
  EXPECT_EQ(qr.scales[0], qf.scales[0] + 1);
  EXPECT_EQ(dequant(qr, 1, 32, ElemType::E4M3, Axis::Row)[0], 480.0f);  // 486.4 -> 480 on the coarser grid
}

TEST(Mx, RelativeErrorBoundForEveryFormat) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 1);
  const int64_t rows = 16, cols = 256;
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = nd(rng) * 3.0f;
  for (ElemType t : kAllElemTypes)
    for (ScaleRule r : {ScaleRule::Floor, ScaleRule::RCeil}) {
      const ElemTraits& f = elem_traits(t);
      const auto q = quant(x, rows, cols, {t, r});
      const auto y = dequant(q, rows, cols, t, Axis::Row);
      for (size_t i = 0; i < x.size(); ++i) {
        const double scale = std::ldexp(1.0, q.scales[i / 32] - 127);
        const double v = std::fabs(x[i]) / scale;
        if (v > f.max_normal) continue;  // clipped (floor only)
        // Half a grid step at v (the subnormal step below min normal).
        const double step =
            std::ldexp(1.0, std::max(static_cast<int>(std::floor(std::log2(std::max(v, 1e-30)))), f.emin()) - f.mbits);
        EXPECT_LE(std::fabs(y[i] - x[i]), step / 2 * scale * (1 + 1e-12)) << f.name << " " << x[i];
      }
    }
}

TEST(Mx, ColAxisIsRowAxisOfTheTranspose) {
  std::mt19937 rng(10);
  std::normal_distribution<float> nd(0, 1);
  const int64_t rows = 64, cols = 40;
  std::vector<float> x(rows * cols), xt(rows * cols);
  for (auto& v : x) v = nd(rng) * std::exp2(static_cast<float>(rng() % 20) - 10);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[c * rows + r] = x[r * cols + c];
  for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::RCeil}) {
    const auto qc = quant(x, rows, cols, {ElemType::E4M3, rule, Axis::Col});
    const auto qr = quant(xt, cols, rows, {ElemType::E4M3, rule, Axis::Row});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(qc.codes[r * cols + c], qr.codes[c * rows + r]);
    for (int64_t g = 0; g < rows / 32; ++g)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(qc.scales[g * cols + c], qr.scales[c * (rows / 32) + g]);
  }
}

TEST(Mx, Bf16AndF16InputsEqualTheirFp32Widening) {
  std::mt19937 rng(11);
  const int64_t n = 32 * 64;
  std::vector<uint16_t> b(n), h(n);
  std::vector<float> bw(n), hw(n);
  for (int64_t i = 0; i < n; ++i) {
    b[i] = static_cast<uint16_t>(rng());
    h[i] = static_cast<uint16_t>(rng());
    bw[i] = bf16_to_f32(b[i]);
    hw[i] = f16_to_f32(h[i]);
  }
  for (Axis axis : {Axis::Row, Axis::Col}) {
    const MxConfig cfg{ElemType::E4M3, ScaleRule::RCeil, axis};
    for (auto [src, in, wide] : {std::tuple{b.data(), InType::BF16, &bw}, std::tuple{h.data(), InType::F16, &hw}}) {
      std::vector<uint8_t> c1(n), s1(mx_num_scales(64, 32, axis));
      mx_quantize(src, in, 64, 32, cfg, c1.data(), s1.data());
      const auto q = quant(*wide, 64, 32, cfg);
      EXPECT_EQ(c1, q.codes);
      EXPECT_EQ(s1, q.scales);
    }
  }
}

TEST(Mx, StochasticRoundingIsUnbiasedAndThreadInvariant) {
  // One block: amax 448 fixes e = 0, so values are on the E4M3 grid directly.
  std::vector<float> x(32 * 512);
  for (int64_t r = 0; r < 512; ++r) {
    x[r * 32] = 448.0f;
    for (int c = 1; c < 32; ++c) x[r * 32 + c] = 1.0f + 0.03125f * c;  // steps of 0.125 at [1, 2)
  }
  MxConfig cfg{ElemType::E4M3, ScaleRule::Floor, Axis::Row, Rounding::Stochastic, 42};
  const auto q1 = quant(x, 512, 32, cfg);
  ThreadPool pool(3);
  const auto q3 = quant(x, 512, 32, cfg, &pool);
  EXPECT_EQ(q1.codes, q3.codes);
  cfg.seed = 43;
  EXPECT_NE(quant(x, 512, 32, cfg).codes, q1.codes);
  cfg.seed = 42;
  const auto y = dequant(q1, 512, 32, ElemType::E4M3, Axis::Row);
  for (int c = 1; c < 32; ++c) {
    const double v = x[c], lo = std::floor(v * 8) / 8, hi = lo + 0.125;
    double sum = 0;
    for (int64_t r = 0; r < 512; ++r) {
      const float yi = y[r * 32 + c];
      ASSERT_TRUE(yi == lo || yi == hi) << v << " -> " << yi;
      sum += yi;
    }
    // 512 draws: the mean is within 5 standard errors of v.
    const double p = (v - lo) / 0.125, se = 0.125 * std::sqrt(p * (1 - p) / 512);
    EXPECT_NEAR(sum / 512, v, 5 * se + 1e-12) << v;
  }
}

TEST(Mx, ShapeErrors) {
  std::vector<float> x(33 * 31);
  std::vector<uint8_t> c(x.size()), s(64);
  EXPECT_THROW(mx_quantize(x.data(), InType::F32, 33, 31, {}, c.data(), s.data()), Error);
  MxConfig col;
  col.axis = Axis::Col;
  EXPECT_THROW(mx_quantize(x.data(), InType::F32, 33, 31, col, c.data(), s.data()), Error);
}

}  // namespace
}  // namespace mxrl
