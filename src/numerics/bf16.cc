#include "numerics/bf16.h"

#include <algorithm>

#include "numerics/formats.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
// f32_to_bf16 without branches: RNE on the upper half, NaN kept (made quiet).
inline uint32_t bf16_bits(uint32_t u) {
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}

constexpr int64_t kGrain = 1 << 14;  // values per task

template <class F>
void for_chunks(int64_t n, const Exec& exec, F&& f) {
  parallel_for(exec.pool, (n + kGrain - 1) / kGrain, [&](int64_t c0, int64_t c1) {
    f(c0 * kGrain, std::min(n, c1 * kGrain));
  });
}
}  // namespace

void bf16_encode(const float* x, int64_t n, uint16_t* out, const Exec& exec) {
  for_chunks(n, exec, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = static_cast<uint16_t>(bf16_bits(f32_bits(x[i])));
  });
}

void bf16_round(const float* x, int64_t n, float* out, const Exec& exec) {
  for_chunks(n, exec, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = f32_from_bits(bf16_bits(f32_bits(x[i])) << 16);
  });
}

}  // namespace mxrl
