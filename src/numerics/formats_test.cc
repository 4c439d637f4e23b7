#include "numerics/formats.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>

namespace mxrl {
namespace {

bool is_nan_code(ElemType t, uint8_t c) { return std::isnan(elem_decode(t, c)); }

// Independent oracle: the nearest code by brute force over all codes (ties to
// the even code, i.e. even mantissa), saturating at max normal.
uint8_t nearest_code(ElemType t, float x) {
  const ElemTraits& f = elem_traits(t);
  const double a = std::min(std::fabs(static_cast<double>(x)), static_cast<double>(f.max_normal));
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < f.sign_bit(); ++c) {
    if (is_nan_code(t, c) || std::isinf(elem_decode(t, c))) continue;
    const double d = std::fabs(a - elem_decode(t, c));
    if (d < best_d || (d == best_d && c % 2 == 0)) best = c, best_d = d;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? f.sign_bit() : 0));
}

TEST(Formats, TraitsMatchTheBrief) {
  struct Row {
    ElemType t;
    float max, min_normal, min_sub;
    int emax;
  };
  const Row rows[] = {{ElemType::E4M3, 448, 0x1p-6f, 0x1p-9f, 8},
                      {ElemType::E5M2, 57344, 0x1p-14f, 0x1p-16f, 15},
                      {ElemType::E2M3, 7.5f, 1, 0.125f, 2},
                      {ElemType::E3M2, 28, 0.25f, 0.0625f, 4},
                      {ElemType::E2M1, 6, 1, 0.5f, 2}};
  for (const Row& r : rows) {
    const ElemTraits& f = elem_traits(r.t);
    SCOPED_TRACE(f.name);
    EXPECT_EQ(f.max_normal, r.max);
    EXPECT_EQ(f.emax, r.emax);
    EXPECT_EQ(elem_decode(r.t, f.max_code), r.max);
    EXPECT_EQ(elem_decode(r.t, 1), r.min_sub);
    EXPECT_EQ(elem_decode(r.t, static_cast<uint8_t>(1 << f.mbits)), r.min_normal);
    EXPECT_EQ(elem_from_name(f.name), r.t);
    // The largest power of two in the format is 2^emax.
    EXPECT_EQ(std::ldexp(1.0f, f.emax) <= f.max_normal, true);
    EXPECT_GT(std::ldexp(1.0f, f.emax + 1), f.max_normal);
  }
  EXPECT_FALSE(elem_from_name("e4m4").has_value());
}

TEST(Formats, SpecialCodes) {
  EXPECT_TRUE(std::isnan(elem_decode(ElemType::E4M3, 0x7F)));
  EXPECT_TRUE(std::isnan(elem_decode(ElemType::E4M3, 0xFF)));
  EXPECT_EQ(elem_decode(ElemType::E4M3, 0x78), 256.0f);  // S.1111.000 is a number
  EXPECT_EQ(elem_decode(ElemType::E5M2, 0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(elem_decode(ElemType::E5M2, 0xFC), -std::numeric_limits<float>::infinity());
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(elem_decode(ElemType::E5M2, c)));
  EXPECT_EQ(elem_encode(ElemType::E4M3, std::nanf("")), 0x7F);
  EXPECT_EQ(elem_encode(ElemType::E5M2, std::nanf("")), 0x7F);
  EXPECT_EQ(elem_encode(ElemType::E2M1, std::nanf("")), 0x0);
  // Saturation: never Inf.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(elem_encode(ElemType::E4M3, inf), 0x7E);
  EXPECT_EQ(elem_encode(ElemType::E4M3, -inf), 0xFE);
  EXPECT_EQ(elem_encode(ElemType::E5M2, inf), 0x7B);
  EXPECT_EQ(elem_encode(ElemType::E4M3, 470.0f), 0x7E);    // would round to 480 (the NaN slot)
  EXPECT_EQ(elem_encode(ElemType::E5M2, 60000.0f), 0x7B);  // would round to 61440 (Inf)
  EXPECT_EQ(elem_encode(ElemType::E2M1, 1e30f), 0x7);
  EXPECT_EQ(elem_encode(ElemType::E4M3, -0.0f), 0x80);
  EXPECT_EQ(elem_encode(ElemType::E3M2, -0.0f), 0x20);
}

TEST(Formats, EveryCodeDecodesReencodesAndIsOrdered) {
  for (ElemType t : kAllElemTypes) {
    const ElemTraits& f = elem_traits(t);
    SCOPED_TRACE(f.name);
    float prev = -1;
    for (int c = 0; c < f.num_codes(); ++c) {
      const float v = elem_decode(t, static_cast<uint8_t>(c));
      if (std::isnan(v)) {
        EXPECT_TRUE(f.has_nan);
        continue;
      }
      if (std::isinf(v)) {
        EXPECT_EQ(elem_encode(t, v), (c & f.sign_bit()) | f.max_code);
        continue;
      }
      EXPECT_EQ(elem_encode(t, v), c) << "value " << v;
      const int mag = c & (f.sign_bit() - 1);
      if (mag == 0) {
        EXPECT_EQ(std::signbit(v), (c & f.sign_bit()) != 0);
      }
      // Positive codes increase with the value; negative codes mirror them.
      if (!(c & f.sign_bit())) {
        EXPECT_GT(v, prev) << "code " << c;
        prev = v;
      } else {
        EXPECT_EQ(v, -elem_decode(t, static_cast<uint8_t>(mag)));
      }
    }
  }
}

TEST(Formats, TiesRoundToEvenAndNeighboursToNearest) {
  for (ElemType t : kAllElemTypes) {
    const ElemTraits& f = elem_traits(t);
    SCOPED_TRACE(f.name);
    for (int c = 0; c < f.max_code; ++c) {
      const double lo = elem_decode(t, c), hi = elem_decode(t, c + 1);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact in FP32
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const int even = (c % 2 == 0) ? c : c + 1;
      EXPECT_EQ(elem_encode(t, mid), even) << lo << " .. " << hi;
      EXPECT_EQ(elem_encode(t, -mid), even | f.sign_bit());
      EXPECT_EQ(elem_encode(t, std::nextafter(mid, 0.0f)), c);
      EXPECT_EQ(elem_encode(t, std::nextafter(mid, 1e9f)), c + 1);
    }
    // Past the max normal: saturate, however far.
    const float max = f.max_normal;
    EXPECT_EQ(elem_encode(t, std::nextafter(max, 1e30f)), f.max_code);
    EXPECT_EQ(elem_encode(t, max * 4), f.max_code);
  }
}

TEST(Formats, EncodeMatchesBruteForceNearestCode) {
  std::mt19937 rng(1);
  for (ElemType t : kAllElemTypes) {
    const ElemTraits& f = elem_traits(t);
    SCOPED_TRACE(f.name);
    std::uniform_real_distribution<double> expo(-20, std::log2(f.max_normal) + 2);
    for (int i = 0; i < 20000; ++i) {
      float x = static_cast<float>(std::exp2(expo(rng)));
      if (rng() & 1) x = -x;
      ASSERT_EQ(elem_encode(t, x), nearest_code(t, x)) << x;
    }
  }
}

TEST(Formats, E8M0) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127));
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
  EXPECT_EQ(f32_bits(e8m0_to_f32(0)), 0x00400000u);  // 2^-127 is an FP32 subnormal
}

// BF16 oracle: truncate, then choose the nearer of the two neighbours.
uint16_t bf16_oracle(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double a = std::fabs(static_cast<double>(bf16_to_f32(lo)));
  const uint16_t hi_mag = hi & 0x7FFF;
  const double b = hi_mag == 0x7F80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bf16_to_f32(hi)));
  const double xa = std::fabs(static_cast<double>(x));
  if (xa - a < b - xa) return lo;
  if (xa - a > b - xa) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Formats, Bf16) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(v), h);
  }
  std::mt19937 rng(2);
  for (int i = 0; i < 200000; ++i) {
    const float x = f32_from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(x) || std::isinf(x)) continue;
    ASSERT_EQ(f32_to_bf16(x), bf16_oracle(x)) << std::hexfloat << x;
  }
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3F808000)), 0x3F80);  // tie to even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3F818000)), 0x3F82);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x7F7FFFFF)), 0x7F80);  // overflow to Inf
}

__attribute__((target("f16c"))) uint16_t hw_f16(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_f32(uint16_t h) { return _cvtsh_ss(h); }

TEST(Formats, F16AgainstTheF16cInstructions) {
  ASSERT_TRUE(__builtin_cpu_supports("avx2")) << "test machine lacks F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_bits(v), f32_bits(hw_f32(static_cast<uint16_t>(h)))) << h;
    if (!std::isnan(v)) {
      ASSERT_EQ(f32_to_f16(v), h);
    }
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> expo(-30, 18);
  for (int i = 0; i < 300000; ++i) {
    float x = (i % 2) ? f32_from_bits(static_cast<uint32_t>(rng())) : static_cast<float>(std::exp2(expo(rng)));
    if (std::isnan(x)) continue;
    ASSERT_EQ(f32_to_f16(x), hw_f16(x)) << std::hexfloat << x;
  }
}

}  // namespace
}  // namespace mxrl
