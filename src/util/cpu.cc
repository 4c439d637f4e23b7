#include "util/cpu.h"

#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cstdlib>
#include <cstring>

namespace mxrl {

static CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  unsigned a, b, c, d;
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14 has no "f16c" for __builtin_cpu_supports.
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  // __builtin_cpu_supports checks XCR0 (OS support) for the AVX-512 state.
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = f.avx512 && (a & (1u << 5));
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx512_vbmi = f.avx512 && (c & (1u << 1));
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

const std::string& cpu_model_name() {
  static const std::string name = [] {
    std::string s;
    unsigned r[4];
    if (__get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004u)
      for (unsigned leaf = 0x80000002u; leaf <= 0x80000004u; ++leaf) {
        __get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3]);
        s.append(reinterpret_cast<const char*>(r), sizeof r);
      }
    s = s.substr(0, s.find('\0'));
    std::string t;  // runs of spaces as one, none at the ends
    for (char c : s)
      if (c != ' ' || (!t.empty() && t.back() != ' ')) t += c;
    while (!t.empty() && t.back() == ' ') t.pop_back();
    return t.empty() ? std::string("unknown") : t;
  }();
  return name;
}

bool request_amx() {
  static const bool ok = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.avx512 || !f.amx_tile || !f.amx_bf16) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

Backend resolve_backend(Backend requested) {
  if (requested == Backend::Auto) {  // read once: every kernel call resolves its backend
    static const Backend best = [] {
      const char* env = std::getenv("MXRL_BACKEND");
      const CpuFeatures& f = cpu_features();
      if (env && std::strcmp(env, "scalar") == 0) return Backend::Scalar;
      if (env && std::strcmp(env, "avx2") == 0) return f.avx2 ? Backend::Avx2 : Backend::Scalar;
      return f.avx512 ? Backend::Avx512 : f.avx2 ? Backend::Avx2 : Backend::Scalar;
    }();
    return best;
  }
  if (requested == Backend::Avx512 && !cpu_features().avx512) return Backend::Scalar;
  if (requested == Backend::Avx2 && !cpu_features().avx2) return Backend::Scalar;
  return requested;
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Auto: return "auto";
    case Backend::Scalar: return "scalar";
    case Backend::Avx2: return "avx2";
    case Backend::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace mxrl
