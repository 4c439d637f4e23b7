// Counter-based random bits for stochastic rounding: the bits for element i
// depend only on (seed, i), so results never depend on threading or order.
#pragma once
#include <cstdint>

namespace mxrl {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

inline constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The stream key for a user seed (mixed so nearby seeds give unrelated streams).
inline constexpr uint64_t sr_key(uint64_t seed) { return splitmix64_mix(seed + kGolden); }

// 32 uniform bits for element `idx` of the stream `key`.
inline constexpr uint32_t sr_bits(uint64_t key, uint64_t idx) {
  return static_cast<uint32_t>(splitmix64_mix(key + idx * kGolden) >> 32);
}

}  // namespace mxrl
