// Deterministic random streams for the RL tasks (internal to mxrl_tasks): every
// draw depends only on the key, so problems are reproducible across runs,
// platforms and thread counts.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "util/splitmix.h"

namespace mxrl::detail {

// A key mixing several values (order matters).
inline uint64_t stream_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6A09E667F3BCC908ull, i = 0;
  for (const uint64_t x : parts) h = splitmix64_mix(h ^ splitmix64_mix(x + ++i * kGolden));
  return h;
}

// SplitMix64 stream.
class Rng {
 public:
  explicit Rng(uint64_t key) : s_(key) {}
  uint64_t next() {
    s_ += kGolden;
    return splitmix64_mix(s_);
  }
  // Uniform in [0, n), n > 0 (rejection sampling, no modulo bias).
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }
  // Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1)); }

 private:
  uint64_t s_;
};

// A pseudo-random permutation of [0, n) evaluated one index at a time (a
// 4-round Feistel network on the smallest even bit width covering n, cycle-
// walked into range): permute(i) for i in [0, n) visits every value once.
inline uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
  if (n <= 1) return 0;
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
  const int half = (bits + 1) / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t x = i;
  do {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64_mix(key ^ splitmix64_mix(r + (round + 1) * kGolden)) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half) | r;
  } while (x >= n);
  return x;
}

}  // namespace mxrl::detail
