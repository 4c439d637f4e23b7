#include "numerics/fp8_grid.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace mxrl {
namespace {

TEST(Fp8Grid, PerTensorScaleIsAmaxOver448) {
  std::vector<float> x = {1.0f, -3.5f, 0.25f, 2.0f, 0.0f, 7.0f};
  std::vector<uint8_t> codes(6);
  float scale = 0;
  fp8_quantize(x.data(), InType::F32, 2, 3, Fp8Grid::per_tensor(2, 3), ElemType::E4M3, codes.data(), &scale);
  EXPECT_EQ(scale, 7.0f / 448.0f);
  EXPECT_EQ(codes[5], 0x7E);  // the amax lands on max normal
  std::vector<float> y(6);
  fp8_dequantize(codes.data(), &scale, 2, 3, Fp8Grid::per_tensor(2, 3), ElemType::E4M3, y.data());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(codes[i], elem_encode(ElemType::E4M3, x[i] / scale));
    EXPECT_NEAR(y[i], x[i], std::fabs(x[i]) / 16 + 1e-6);
  }
}

TEST(Fp8Grid, Block128GroupsAreIndependentAndRagged) {
  const int64_t rows = 130, cols = 260;  // 2 x 3 tiles, ragged at both edges
  std::vector<float> x(rows * cols, 1.0f);
  x[0] = 100.0f;                // tile (0,0)
  x[129 * cols + 259] = -0.5f;  // tile (1,2), the 2x4 corner
  for (int64_t r = 0; r < 128; ++r) x[r * cols + 128] = 0.0f, x[r * cols + 129] = 0.0f;
  const Fp8Grid g = Fp8Grid::block128_weight();
  ASSERT_EQ(fp8_num_scales(rows, cols, g), 6);
  std::vector<uint8_t> codes(x.size());
  std::vector<float> s(6);
  fp8_quantize(x.data(), InType::F32, rows, cols, g, ElemType::E4M3, codes.data(), s.data());
  EXPECT_EQ(s[0], 100.0f / 448);
  EXPECT_EQ(s[1], 1.0f / 448);
  EXPECT_EQ(s[5], 1.0f / 448);
  EXPECT_EQ(s[3], 1.0f / 448);
}

TEST(Fp8Grid, ZeroGroupHasZeroScaleAndCodes) {
  std::vector<float> x(256, 0.0f);
  for (int i = 128; i < 256; ++i) x[i] = static_cast<float>(i);
  std::vector<uint8_t> codes(256, 0xAA);
  std::vector<float> s(2);
  fp8_quantize(x.data(), InType::F32, 1, 256, Fp8Grid::block128_act(), ElemType::E4M3, codes.data(), s.data());
  EXPECT_EQ(s[0], 0.0f);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(codes[i], 0);
  EXPECT_EQ(s[1], 255.0f / 448);
}

TEST(Fp8Grid, PerTokenRowsDoNotInfluenceEachOther) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> x(8 * 64);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> all(x.size()), one(64);
  std::vector<float> s_all(8), s_one(1);
  fp8_quantize(x.data(), InType::F32, 8, 64, Fp8Grid::per_token(64), ElemType::E4M3, all.data(), s_all.data());
  for (int r = 0; r < 8; ++r) {
    fp8_quantize(&x[r * 64], InType::F32, 1, 64, Fp8Grid::per_token(64), ElemType::E4M3, one.data(), s_one.data());
    EXPECT_EQ(s_one[0], s_all[r]);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + r * 64));
  }
}

}  // namespace
}  // namespace mxrl
