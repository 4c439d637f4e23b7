// How to run a kernel: on which threads, with which backend, timed or not.
// Every kernel entry point (quantization, GEMM, the other ops, transposes)
// takes one; Exec{} is the calling thread and the best backend of this CPU.
#pragma once
#include "util/cpu.h"

namespace mxrl {

class ThreadPool;
struct PhaseTimes;

struct Exec {
  ThreadPool* pool = nullptr;  // null: the calling thread only
  Backend backend = Backend::Auto;
  PairKernel pair_kernel = PairKernel::Auto;  // BF16 and MX weights on AVX-512 (kernels/gemm/gemm.h)
  PhaseTimes* times = nullptr;                // when set, quantization and GEMM time is added here
};

// The one dispatch idiom: a kernel family is a table of function pointers per
// backend (scalar reference, AVX-512), and each call picks the table for
// exec.backend as resolved on this CPU:
//   return backend_table(exec.backend, kFooScalar, MXRL_AVX512(kFooAvx512));
// MXRL_AVX512 is null where the build has no AVX-512 tables (not x86-64).
template <typename Table>
const Table& backend_table(Backend requested, const Table& scalar, const Table* avx512) {
  return avx512 && resolve_backend(requested) == Backend::Avx512 ? *avx512 : scalar;
}
#if defined(__x86_64__)
#define MXRL_AVX512(table) (&(table))
#else
#define MXRL_AVX512(table) nullptr
#endif

}  // namespace mxrl
