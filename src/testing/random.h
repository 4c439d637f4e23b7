// Random test data.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace mxrl::test {

// n draws of N(0, scale^2) from std::mt19937(seed), in order.
inline std::vector<float> randn(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace mxrl::test
