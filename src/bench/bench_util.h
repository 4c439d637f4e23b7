// Timing shared by the bench commands.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/params.h"
#include "util/cpu.h"
#include "util/clock.h"
#include "util/thread_pool.h"

namespace mxrl {

// The median of t (the upper one of an even count).
inline double median(std::vector<double> t) {
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// Median seconds of a run of fn over >= 5 repetitions and >= min_time
// (after one warm-up run: page faults, caches), at most 200 runs.
inline double time_median(const std::function<void()>& fn, double min_time) {
  fn();
  std::vector<double> t;
  double total = 0;
  while (t.size() < 5 || total < min_time) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
    total += t.back();
    if (t.size() >= 200) break;
  }
  return median(std::move(t));
}

// The FP32 FMA peak of this machine as a loop of independent FMAs measures
// it (fma_peak.cc), in the widest vectors the backend uses (8 lanes on AVX2,
// 16 on AVX-512): GFLOP/s of one thread alone, and per thread with every
// thread of the pool at once. What GEMM figures are read against. lanes 0:
// no vector FMA (the scalar backend), nothing measured.
struct FmaPeak {
  int lanes = 0, threads = 0;
  double one_thread = 0, all_threads = 0;
};
FmaPeak measure_fma_peak(ThreadPool& pool);

// What a bench's figures were measured with, for its header and its --json
// object ("provenance"): the version and git commit of the build, the CPU's
// model name, the ISA features that decide the kernels (avx512, avx512_bf16,
// amx: AMX-TILE + AMX-BF16 by CPUID) and the kernels used: the backend and,
// for BF16 and MX weights, the pair kernel `requested` resolves to, per shape
// class for Auto (with the start-up micro-benchmark's times). uses_gemm =
// false (bench quantize): no pair kernel, nothing measured. Call it before
// the bench starts its own work: Auto's micro-benchmark runs at its first use
// (bench_util.cc).
nlohmann::json bench_provenance(PairKernel requested, bool uses_gemm = true);
// The provenance as the header's two lines, each ending in a newline.
std::string bench_provenance_text(const nlohmann::json& p);

// A cheap deterministic stand-in for init_params at 0.6B (bench_decode.cc).
void fill_params(ParamTable& params, ThreadPool& pool, float std = 0.02f);

}  // namespace mxrl
