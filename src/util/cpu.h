// Runtime CPU feature detection and backend choice. Every fast kernel has a
// scalar reference; `MXRL_BACKEND=scalar` in the environment forces it.
#pragma once

namespace mxrl {

enum class Backend { Auto, Scalar, Avx512 };

struct CpuFeatures {
  bool avx512 = false;       // F + BW + DQ + VL, with OS support
  bool avx512_bf16 = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
};

const CpuFeatures& cpu_features();
// Auto resolves to the best backend this CPU runs (respecting MXRL_BACKEND);
// asking for one the CPU lacks falls back to Scalar.
Backend resolve_backend(Backend requested);
const char* backend_name(Backend b);

}  // namespace mxrl
