// ops_impl.h compiled for AVX-512 + FMA: the same operations, hardware FMA and
// whatever vectorization leaves results unchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/ops_kernels.h"
#include "util/target_avx512.h"

MXRL_BEGIN_AVX512
#include "kernels/ops_impl.h"
#include "kernels/ops_backward_impl.h"

namespace mxrl::detail {
const OpsKernels kOpsAvx512 = kOps;
const OpsBackwardKernels kOpsBackwardAvx512 = kOpsBackward;
}
MXRL_END_AVX512
