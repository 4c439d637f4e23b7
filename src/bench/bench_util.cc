// The provenance every bench prints in its header and its --json object
// (bench_util.h).
#include <fmt/format.h>

#include "bench/bench_util.h"
#include "kernels/gemm/gemm.h"
#include "util/cpu.h"
#include "util/version.h"

namespace mxrl {

nlohmann::json bench_provenance(PairKernel requested, bool uses_gemm) {
  const CpuFeatures& f = cpu_features();
  const Backend be = resolve_backend(Backend::Auto);
  nlohmann::json kernels = {{"backend", backend_name(be)}};
  if (uses_gemm) {
    nlohmann::json pk = {{"requested", pair_kernel_name(requested)}};
    if (be == Backend::Avx2) {
      pk["summary"] = "avx2 (the FMA pair chain)";
    } else if (be != Backend::Avx512) {
      pk["summary"] = "scalar reference";
    } else {
      pk["summary"] = pair_kernel_summary(requested);
      if (requested == PairKernel::Auto || (requested == PairKernel::Amx && !detail::amx_available())) {
        const PairKernelChoice& c = pair_kernel_choice();
        pk["how"] = c.how;
        pk["classes"] = nlohmann::json::array();
        for (const PairKernelClass& k : c.classes) {
          nlohmann::json e = {{"class", k.name},
                              {"min_rows", k.min_rows},
                              {"max_rows", k.max_rows == 0 ? nlohmann::json() : nlohmann::json(k.max_rows)},
                              {"kernel", pair_kernel_name(k.kernel)}};
          if (k.dot_us >= 0) e["dot_us"] = k.dot_us, e["fma_us"] = k.fma_us;
          pk["classes"].push_back(e);
        }
      }
    }
    kernels["pair_kernel"] = pk;
  }
  return {{"version", MXRL_VERSION},
          {"commit", build_commit()},
          {"cpu", cpu_model_name()},
          {"isa",
           {{"avx2", f.avx2},
            {"avx512", f.avx512},
            {"avx512_bf16", f.avx512_bf16},
            {"avx512_vbmi", f.avx512_vbmi},
            {"amx", f.amx_tile && f.amx_bf16}}},
          {"kernels", kernels}};
}

std::string bench_provenance_text(const nlohmann::json& p) {
  const auto& isa = p["isa"];
  auto yn = [&](const char* k) { return fmt::format("{} {}", k, isa[k].get<bool>() ? "yes" : "no"); };
  std::string s = fmt::format("mxrl {}, commit {}; CPU {} ({}, {}, {}, {}, {})\n", p["version"].get<std::string>(),
                              p["commit"].get<std::string>(), p["cpu"].get<std::string>(), yn("avx2"), yn("avx512"),
                              yn("avx512_bf16"), yn("avx512_vbmi"), yn("amx"));
  const auto& k = p["kernels"];
  s += fmt::format("kernels: backend {}", k["backend"].get<std::string>());
  if (k.contains("pair_kernel")) {
    const auto& pk = k["pair_kernel"];
    s += fmt::format(", BF16/MX pair kernel {}", pk["summary"].get<std::string>());
    if (pk.contains("classes") && pk["how"] == "measured") {
      s += " (start-up micro-benchmark, dot / fma:";
      const char* sep = " ";
      for (const auto& c : pk["classes"]) {
        s += fmt::format("{}{} {:.0f} / {:.0f} us", sep, c["class"].get<std::string>(), c["dot_us"].get<double>(),
                         c["fma_us"].get<double>());
        sep = ", ";
      }
      s += ")";
    }
  }
  return s + "\n";
}

}  // namespace mxrl
