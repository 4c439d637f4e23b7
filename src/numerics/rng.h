// Counter-based random bits for stochastic rounding: the bits for element i
// depend only on (seed, i), so results never depend on threading or order.
#pragma once
#include <cstdint>

#include "util/splitmix.h"

namespace mxrl {

// The stream key for a user seed (mixed so nearby seeds give unrelated streams).
inline constexpr uint64_t sr_key(uint64_t seed) { return splitmix64_mix(seed + kGolden); }

// 32 uniform bits for element `idx` of the stream `key`.
inline constexpr uint32_t sr_bits(uint64_t key, uint64_t idx) {
  return static_cast<uint32_t>(splitmix64_mix(key + idx * kGolden) >> 32);
}

}  // namespace mxrl
