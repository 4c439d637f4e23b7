// ops_impl.h compiled with AVX-512 + FMA: the same operations, hardware FMA and
// whatever vectorization leaves results unchanged.
#include "kernels/ops_impl.h"

namespace mxrl::detail {
const OpsKernels kOpsAvx512 = kOps;
}
