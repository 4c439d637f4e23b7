// The pair chain on VDPBF16PS (gemm_pairs_avx512.h with the Dot policy), and
// the raw instructions the start-up self-test (gemm.cc) checks against the
// contract's scalar model. Runs only where cpu_features().avx512_bf16 holds.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "kernels/gemm/aligned_scratch.h"
#include "kernels/gemm/gemm.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512_BF16
#include "numerics/simd_avx512.h"

#include "kernels/gemm/gemm_avx512_common.h"

namespace mxrl::detail {
namespace {
struct DotMac {
  static constexpr bool kDot = true;
  // 32 FP32 to 32 BF16 (RNE, DAZ): lo -> halves 0..15, hi -> 16..31, in order.
  static __m512i to_bf16(__m512 lo, __m512 hi) { return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)); }
  static __m512 dot(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  }
};
}  // namespace
}  // namespace mxrl::detail

#define MXRL_PAIR_LUT_TARGET MXRL_TARGET_AVX512_BF16_VBMI
#include "kernels/gemm/gemm_pairs_avx512.h"

namespace mxrl::detail {

void gemm_pairs_dot(const float* x, const PackedWeight& w, float* y, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  pair_run<DotMac>(x, w, y, m0, m1, p0, p1);
}

void bf16_dot_instruction(float* acc, const uint32_t* a, const uint32_t* b) {
  const __m512 r = DotMac::dot(_mm512_loadu_ps(acc), _mm512_loadu_si512(a), _mm512_loadu_si512(b));
  _mm512_storeu_ps(acc, r);
}

void bf16_convert_instruction(const float* x, uint16_t* out) {
  _mm512_storeu_si512(out, DotMac::to_bf16(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)));
}

}  // namespace mxrl::detail
MXRL_END_AVX512_BF16
