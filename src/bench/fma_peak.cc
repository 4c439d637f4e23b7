// The FMA peak the GEMM figures are measured against (bench_util.h).
#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "bench/bench_util.h"
#include "util/target_avx2.h"
#include "util/target_avx512.h"

namespace mxrl {
namespace {
constexpr int64_t kIters = 1 << 20;  // x 10 chains x lanes x 2 FLOP: ~0.1-0.3 s per probe

// 10 independent chains acc = fma(acc, m, c): more than FMA latency x FMA
// units on any CPU of this kind, so the units, not the chains, bound it.
MXRL_BEGIN_AVX2
double fma_loop_avx2() {
  __m256 acc[10];
  for (int j = 0; j < 10; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 10
    for (int j = 0; j < 10; ++j) acc[j] = _mm256_fmadd_ps(acc[j], m, c);
  }
  float s = 0;
  for (int j = 0; j < 10; ++j) s += _mm256_cvtss_f32(acc[j]);
  return s;
}
MXRL_END_AVX2

MXRL_BEGIN_AVX512
double fma_loop_avx512() {
  __m512 acc[10];
  for (int j = 0; j < 10; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 10
    for (int j = 0; j < 10; ++j) acc[j] = _mm512_fmadd_ps(acc[j], m, c);
  }
  float s = 0;
  for (int j = 0; j < 10; ++j) s += _mm512_cvtss_f32(acc[j]);
  return s;
}
MXRL_END_AVX512

std::atomic<double> g_sink{0};

// GFLOP/s of one probe on the calling thread (the best of 3).
double probe(int lanes) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    g_sink = g_sink + (lanes == 16 ? fma_loop_avx512() : fma_loop_avx2());
    best = std::max(best, 2.0 * lanes * 10 * kIters / seconds_since(t0) / 1e9);
  }
  return best;
}
}  // namespace

FmaPeak measure_fma_peak(ThreadPool& pool) {
  FmaPeak p;
  const Backend b = resolve_backend(Backend::Auto);
  if (b != Backend::Avx2 && b != Backend::Avx512) return p;  // the scalar backend: no vector FMA to measure
  p.lanes = b == Backend::Avx512 ? 16 : 8;
  p.one_thread = probe(p.lanes);
  std::vector<double> each(pool.size(), 0.0);
  pool.parallel_for(pool.size(), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) each[t] = probe(p.lanes);
  });
  double sum = 0;
  for (double v : each) sum += v;
  p.all_threads = sum / static_cast<double>(each.size());
  p.threads = pool.size();
  return p;
}

}  // namespace mxrl
