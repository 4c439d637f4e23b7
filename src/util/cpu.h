// Runtime CPU feature detection and backend choice. Every fast kernel has a
// scalar reference; `MXRL_BACKEND=scalar` in the environment forces it.
#pragma once
#include <string>

namespace mxrl {

// Avx2 (CPUs with AVX2 + FMA + F16C but not AVX-512): its own GEMM kernels
// (gemm_avx2.cc), MX row quantization and BF16 rounding (quant_avx2.cc), and
// the ops' scalar code compiled for AVX2 + FMA (ops_avx2.cc); every other
// kernel runs its scalar reference there.
enum class Backend { Auto, Scalar, Avx2, Avx512 };
// How the AVX-512 backend computes GEMMs with BF16 and MX weights (kernels/gemm/gemm.h):
// Auto (per shape class, the faster of Dot and Fma here; Dot only where
// VDPBF16PS passes its self-test: pair_kernel_choice), Dot, Fma, or Amx
// (AMX tiles: batch-invariant but not the reference pair chain; only when asked for).
enum class PairKernel { Auto, Dot, Fma, Amx };

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C, with OS support
  bool avx512 = false;  // F + BW + DQ + VL, with OS support
  bool avx512_bf16 = false;
  bool avx512_vbmi = false;  // VPERMI2B: the GEMM's table-lookup MX E4M3 decode
  bool amx_tile = false;  // CPUID only: usable after request_amx()
  bool amx_bf16 = false;
};

const CpuFeatures& cpu_features();
// The CPU's model name, as CPUID's brand string gives it (what /proc/cpuinfo
// calls "model name"), spaces trimmed; "unknown" where there is none.
const std::string& cpu_model_name();
// AMX-TILE + AMX-BF16 usable by this process: the CPU has them (and
// AVX-512), and the OS granted the tile data state (on Linux, arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA, asked once, at the first call; the
// permission is process-wide). False elsewhere. Asked only by code that wants
// AMX, so processes that never use it keep the smaller signal frames.
bool request_amx();
// Auto resolves to the best backend this CPU runs: Avx512, else Avx2, else
// Scalar; MXRL_BACKEND=scalar or =avx2 in the environment (read once) caps it.
// Asking for one the CPU lacks falls back to Scalar.
Backend resolve_backend(Backend requested);
const char* backend_name(Backend b);

}  // namespace mxrl
