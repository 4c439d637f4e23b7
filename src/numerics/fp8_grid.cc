#include "numerics/fp8_grid.h"

#include <algorithm>
#include <vector>

#include "numerics/quant_kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
void check(int64_t rows, int64_t cols, const Fp8Grid& g) {
  if (rows < 0 || cols < 0) fail("fp8 grid: negative shape [{}, {}]", rows, cols);
  if (g.group_rows < 1 || g.group_cols < 1)
    fail("fp8 grid: group {}x{} must be at least 1x1", g.group_rows, g.group_cols);
}
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(cols, 1)); }
}  // namespace

int64_t fp8_num_scales(int64_t rows, int64_t cols, const Fp8Grid& g) {
  return ((rows + g.group_rows - 1) / g.group_rows) * ((cols + g.group_cols - 1) / g.group_cols);
}

void fp8_quantize(const void* x, InType in, int64_t rows, int64_t cols, const Fp8Grid& g, ElemType elem, uint8_t* codes,
                  float* scales, const Exec& exec) {
  check(rows, cols, g);
  const auto& k = detail::quant_kernels(exec.backend);
  const int64_t ncg = (cols + g.group_cols - 1) / g.group_cols;
  const int64_t nrg = (rows + g.group_rows - 1) / g.group_rows;
  // 1) max |x| per row and column group, 2) per group (max is exact, so the
  // split does not matter), 3) codes.
  std::vector<uint32_t> row_amax(static_cast<size_t>(rows * ncg));
  parallel_for(
      exec.pool, rows,
      [&](int64_t r0, int64_t r1) { k.group_amax(x, in, cols, g.group_cols, r0, r1, row_amax.data()); },
      row_grain(cols));
  const float max_normal = elem_traits(elem).max_normal;
  for (int64_t rg = 0; rg < nrg; ++rg)
    for (int64_t cg = 0; cg < ncg; ++cg) {
      uint32_t m = 0;
      for (int64_t r = rg * g.group_rows; r < std::min(rows, (rg + 1) * g.group_rows); ++r)
        m = std::max(m, row_amax[r * ncg + cg]);
      scales[rg * ncg + cg] = f32_from_bits(m) / max_normal;
    }
  parallel_for(
      exec.pool, rows,
      [&](int64_t r0, int64_t r1) {
        k.group_encode(x, in, cols, g.group_rows, g.group_cols, r0, r1, elem, scales, codes);
      },
      row_grain(cols));
}

void fp8_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const Fp8Grid& g,
                    ElemType elem, float* out, const Exec& exec) {
  check(rows, cols, g);
  const auto& k = detail::quant_kernels(exec.backend);
  parallel_for(
      exec.pool, rows,
      [&](int64_t r0, int64_t r1) {
        k.group_decode(codes, cols, g.group_rows, g.group_cols, r0, r1, elem, scales, out);
      },
      row_grain(cols));
}

}  // namespace mxrl
