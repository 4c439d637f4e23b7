// SplitMix64: the one mixing function behind every counter-based random
// stream and hash in mxrl (stochastic rounding, sampling, task generators,
// vocabulary hashing, benchmark data). Header-only.
#pragma once
#include <cstdint>

namespace mxrl {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio

// SplitMix64's finalizer (Steele, Lea and Flood 2014; Stafford's variant 13).
inline constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One SplitMix64 step from state x: mix(x + golden).
inline constexpr uint64_t splitmix64(uint64_t x) { return splitmix64_mix(x + kGolden); }

}  // namespace mxrl
