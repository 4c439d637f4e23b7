// ops_impl.h compiled for AVX2 + FMA (Backend::Avx2, CPUs without AVX-512):
// the same operations in the same order as the scalar build, with hardware
// FMA for the scalar build's fmaf calls and whatever vectorization leaves
// results unchanged (-ffp-contract=off); bit for bit the scalar build
// (ops_test.cc, ops_backward_test.cc).
#if defined(__x86_64__)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops/ops_kernels.h"
#include "util/target_avx2.h"

MXRL_BEGIN_AVX2
#include "kernels/ops/ops_backward_impl.h"
#include "kernels/ops/ops_impl.h"

namespace mxrl::detail {
const OpsKernels kOpsAvx2 = kOps;
const OpsBackwardKernels kOpsBackwardAvx2 = kOpsBackward;
}  // namespace mxrl::detail
MXRL_END_AVX2
#endif  // __x86_64__
