// The reference build of ops_impl.h (baseline x86-64).
#include "kernels/ops_impl.h"

namespace mxrl::detail {
const OpsKernels kOpsScalar = kOps;
}
