// The bulk BF16 rounding equals the scalar reference f32_to_bf16 bit for bit.
#include "numerics/bf16.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "numerics/formats.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

// Every class of input: all exponents with the rounding-critical low halves
// (ties, ties +- 1, all ones), and random bit patterns.
std::vector<uint32_t> hard_bits() {
  std::vector<uint32_t> v;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x7FFE};
  for (uint32_t sign : {0u, 0x80000000u})
    for (uint32_t e = 0; e < 256; ++e)
      for (uint32_t hi_m : {0x00u, 0x01u, 0x40u, 0x7Eu, 0x7Fu})
        for (uint32_t lo : lows) v.push_back(sign | (e << 23) | (hi_m << 16) | lo);
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) v.push_back(rng());
  return v;
}

TEST(Bf16Bulk, EqualsTheScalarReferenceOnEveryInputClass) {
  const std::vector<uint32_t> bits = hard_bits();
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) x[i] = f32_from_bits(bits[i]);
  ThreadPool pool(3);
  std::vector<uint16_t> enc(x.size());
  std::vector<float> round(x.size()), in_place = x;
  bf16_encode(x.data(), static_cast<int64_t>(x.size()), enc.data(), Exec{&pool});
  bf16_round(x.data(), static_cast<int64_t>(x.size()), round.data(), Exec{&pool});
  bf16_round(in_place.data(), static_cast<int64_t>(x.size()), in_place.data());
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t ref = f32_to_bf16(x[i]);
    bad += enc[i] != ref || f32_bits(round[i]) != uint32_t(ref) << 16 || f32_bits(in_place[i]) != uint32_t(ref) << 16;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Bf16Bulk, KnownValues) {
  const float x[] = {1.0f,    f32_from_bits(0x3F808000), f32_from_bits(0x3F818000),
                     3.4e38f, f32_from_bits(0x7F800001), -0.0f};
  uint16_t out[6];
  bf16_encode(x, 6, out);
  EXPECT_EQ(out[0], 0x3F80);
  EXPECT_EQ(out[1], 0x3F80);  // tie to even
  EXPECT_EQ(out[2], 0x3F82);  // tie to even (up)
  EXPECT_EQ(out[3], 0x7F80);  // overflow to Inf
  EXPECT_EQ(out[4], 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(out[5], 0x8000);
}

}  // namespace
}  // namespace mxrl
