// The FP8 grids other rollout engines use (docs/reference.md §3), emulated exactly:
// one FP32 scale per group of gr x gc values (groups clipped at the edges),
//   scale = fp32(amax / max_normal),  code = RNE_saturating(fp32(x / scale)),
//   value = fp32(decode(code) * scale).
// A group whose scale is 0 (all zeros) gets zero codes.
//   per-tensor ("current scaling"): gr = rows, gc = cols
//   per-token activations:          gr = 1,    gc = cols
//   block-128 weights (DeepSeek):   gr = 128,  gc = 128
//   block-128 activations:          gr = 1,    gc = 128
#pragma once
#include <algorithm>
#include <cstdint>

#include "numerics/mx.h"

namespace mxrl {

struct Fp8Grid {
  int64_t group_rows, group_cols;
  static Fp8Grid per_tensor(int64_t rows, int64_t cols) {
    return {std::max<int64_t>(rows, 1), std::max<int64_t>(cols, 1)};
  }
  static Fp8Grid per_token(int64_t cols) { return {1, std::max<int64_t>(cols, 1)}; }
  static Fp8Grid block128_weight() { return {128, 128}; }
  static Fp8Grid block128_act() { return {1, 128}; }
};

// Number of scales: ceil(rows/gr) * ceil(cols/gc).
int64_t fp8_num_scales(int64_t rows, int64_t cols, const Fp8Grid& g);

void fp8_quantize(const void* x, InType in, int64_t rows, int64_t cols, const Fp8Grid& g, ElemType elem, uint8_t* codes,
                  float* scales, const Exec& exec = {});
void fp8_dequantize(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols, const Fp8Grid& g,
                    ElemType elem, float* out, const Exec& exec = {});

}  // namespace mxrl
