// Keys and values in the two layouts the attention kernels read.
#pragma once
#include <cstdint>
#include <vector>

namespace mxrl::test {

// rows [n][stride] (group g's head_dim values at g * hd of each row) as a
// KvCache holds them: [group][pos][hd], each group's history contiguous.
inline std::vector<float> group_histories(const std::vector<float>& rows, int64_t n, int64_t groups, int64_t hd,
                                          int64_t stride) {
  std::vector<float> out(static_cast<size_t>(groups * n * hd));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t d = 0; d < hd; ++d) out[(g * n + j) * hd + d] = rows[j * stride + g * hd + d];
  return out;
}

}  // namespace mxrl::test
