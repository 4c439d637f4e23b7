#include "numerics/bf16.h"

#include <algorithm>

#include "numerics/formats.h"
#include "numerics/quant_kernels.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
constexpr int64_t kGrain = 1 << 14;  // values per task

template <class F>
void for_chunks(int64_t n, const Exec& exec, F&& f) {
  parallel_for(exec.pool, (n + kGrain - 1) / kGrain,
               [&](int64_t c0, int64_t c1) { f(c0 * kGrain, std::min(n, c1 * kGrain)); });
}
}  // namespace

void bf16_encode(const float* x, int64_t n, uint16_t* out, const Exec& exec) {
  const auto& k = detail::quant_kernels(exec.backend);
  for_chunks(n, exec, [&](int64_t b, int64_t e) { k.bf16_encode(x + b, e - b, out + b); });
}

void bf16_round(const float* x, int64_t n, float* out, const Exec& exec) {
  const auto& k = detail::quant_kernels(exec.backend);
  for_chunks(n, exec, [&](int64_t b, int64_t e) { k.bf16_round(x + b, e - b, out + b); });
}

}  // namespace mxrl
