// The reference build of ops_impl.h (baseline x86-64).
#include "kernels/ops/ops_backward_impl.h"
#include "kernels/ops/ops_impl.h"

namespace mxrl::detail {
const OpsKernels kOpsScalar = kOps;
const OpsBackwardKernels kOpsBackwardScalar = kOpsBackward;
}  // namespace mxrl::detail
