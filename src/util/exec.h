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
// backend (scalar reference, AVX2 where the family has one, AVX-512), and
// each call picks the table for exec.backend as resolved on this CPU:
//   return backend_table(exec.backend, kFooScalar, MXRL_AVX2(kFooAvx2), MXRL_AVX512(kFooAvx512));
// A family without an AVX2 table passes nullptr there (or uses the 3-argument
// form): the AVX2 backend then runs its scalar reference. MXRL_AVX2 and
// MXRL_AVX512 are null where the build has no such tables (not x86-64).
template <typename Table>
const Table& backend_table(Backend requested, const Table& scalar, const Table* avx2, const Table* avx512) {
  const Backend b = resolve_backend(requested);
  if (b == Backend::Avx512 && avx512) return *avx512;
  if (b == Backend::Avx2 && avx2) return *avx2;
  return scalar;
}
template <typename Table>
const Table& backend_table(Backend requested, const Table& scalar, const Table* avx512) {
  return backend_table(requested, scalar, static_cast<const Table*>(nullptr), avx512);
}
#if defined(__x86_64__)
#define MXRL_AVX2(table) (&(table))
#define MXRL_AVX512(table) (&(table))
#else
#define MXRL_AVX2(table) nullptr
#define MXRL_AVX512(table) nullptr
#endif

}  // namespace mxrl
