// mxrl bench gemm: GFLOP/s of mxrl's batch-invariant GEMM with BF16, MXFP8
// (E4M3, rceil) and FP32 weights, beside oneDNN's BF16 (bf16 x bf16 -> f32)
// and FP32 matmul on the same shapes, in the same run, with the same number of
// threads. X is FP32 for mxrl (oneDNN BF16 gets it already rounded to BF16);
// weight packing / reordering and primitive creation are not timed (mxrl's pack
// time is reported on its own). The bf16 and mxfp8 columns use the pair kernel
// --kernels selects (auto: per shape class, dot or fma, whichever a start-up
// micro-benchmark found faster; gemm.h pair_kernel_choice); where the
// CPU has AMX, two more columns time the AMX pair kernel on the same weights.
// oneDNN picks its own ISA (AMX on such a CPU); ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
// in the environment (read once, at its first use) caps it below AMX.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <dlfcn.h>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "kernels/gemm/gemm.h"
#include "numerics/mx.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
// oneDNN here runs on OpenMP; its thread count is set through the OpenMP
// runtime it loaded (no link dependency of our own on OpenMP).
void set_onednn_threads(int n) {
  using Fn = void (*)(int);
  if (auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) fn(n);
}

// One oneDNN matmul, Y[M,N] = X[M,K] W^T, weights reordered once into the
// primitive's preferred layout.
struct DnnlMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
  std::string impl;

  DnnlMatmul(int64_t m, int64_t n, int64_t k, bool bf16, const void* x, const void* w_nk, float* y) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc a_md({m, k}, in, tag::ab), b_any({k, n}, in, tag::any), c_md({m, n}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md), eng);
    impl = pd.impl_info_str();
    src = dnnl::memory(a_md, eng, const_cast<void*>(x));
    dst = dnnl::memory(c_md, eng, y);
    dnnl::memory user_w({{k, n}, in, tag::ba}, eng, const_cast<void*>(w_nk));  // W[N,K] row-major is W^T in "ba"
    wei = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(user_w, wei).execute(strm, user_w, wei);
    strm.wait();
    prim = dnnl::matmul(pd);
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    strm.wait();
  }
};

struct Row {
  int64_t m, n, k;
  double s_bf16, s_mx, s_f32, s_dnnl_bf16, s_dnnl_f32;
  double s_amx_bf16, s_amx_mx;  // 0: AMX not measured
};

// M = 1 (a decode step's linear) with MX E4M3 weights under each decode of
// the pair kernels (table lookup, or FP32 shift-and-multiply: the same bits),
// beside BF16 weights: GB/s of packed weight bytes read. Weights that fit in
// L2 measure the kernel's compute rate; a 64 MiB one, what memory allows.
struct DecodeRow {
  int threads;
  int64_t n, k;
  double gbs_bf16, gbs_lut, gbs_shift;
};

std::vector<DecodeRow> decode_kernel_rows(const Exec& exec, int max_threads, double min_time) {
  std::vector<DecodeRow> out;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0, 1);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{256, 1024}, {32768, 2048}}) {
    std::vector<uint16_t> wb(n * k);
    for (auto& v : wb) v = f32_to_bf16(nd(rng) * 0.02f);
    std::vector<uint8_t> codes(n * k), scales(mx_num_scales(n, k, Axis::Row));
    mx_quantize(wb.data(), InType::BF16, n, k, MxConfig{}, codes.data(), scales.data(), exec);
    WeightView vm{WFormat::MX, n, k, codes.data(), scales.data()};
    vm.elem = ElemType::E4M3;
    const PackedWeight pb = PackedWeight::pack({WFormat::BF16, n, k, wb.data()}, exec), pm = PackedWeight::pack(vm, exec);
    std::vector<float> x(k), y(n);
    for (auto& v : x) v = nd(rng);
    for (int t : {1, max_threads}) {
      if (t == 1 && max_threads == 1 && !out.empty() && out.back().n == n) continue;
      ThreadPool pool(t);
      const Exec e{&pool, exec.backend, exec.pair_kernel};
      auto rate = [&](const PackedWeight& w, bool lut) {
        detail::set_pair_lut_enabled(lut);
        const double s = time_median([&] { gemm(x.data(), 1, w, y.data(), e); }, min_time);
        detail::set_pair_lut_enabled(true);
        return static_cast<double>(w.bytes()) / s / 1e9;
      };
      // Interleaved: shift, lut, bf16, twice; the better of each pair.
      DecodeRow r{t, n, k, 0, 0, 0};
      for (int rep = 0; rep < 2; ++rep) {
        r.gbs_shift = std::max(r.gbs_shift, rate(pm, false));
        r.gbs_lut = std::max(r.gbs_lut, rate(pm, true));
        r.gbs_bf16 = std::max(r.gbs_bf16, rate(pb, true));
      }
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

void bench_gemm(const BenchGemmOptions& a) {
  for (const auto& [m, n, k] : a.shapes)
    if (k % kMxBlock != 0)
      fail("bench gemm: --shape {}x{}x{}: K must be a multiple of {} (the MXFP8 column's blocks)", m, n, k, kMxBlock);
  const nlohmann::json provenance = bench_provenance(a.pair_kernel);
  // The AMX columns: where it runs and is not already what the bf16 / mxfp8 columns use.
  const bool amx_cols = detail::amx_available() && resolve_pair_kernel(a.pair_kernel, 1) != PairKernel::Amx;
  ThreadPool pool(a.threads);
  set_onednn_threads(pool.size());
  const Exec exec{&pool, Backend::Auto, a.pair_kernel};
  const Exec amx_exec{&pool, Backend::Auto, PairKernel::Amx};
  // Per weight shape (N, K), the Ms measured with it: every M of the default
  // set with every (N, K), or --shape's, grouped by their (N, K) in order.
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::vector<int64_t>>> plan;
  if (!a.shapes.empty()) {
    for (const auto& [m, n, k] : a.shapes) {
      // Named, not captured: clang 14 lacks C++20's capture of structured bindings (P1091).
      const std::pair<int64_t, int64_t> nk{n, k};
      auto it = std::find_if(plan.begin(), plan.end(), [&](const auto& p) { return p.first == nk; });
      if (it == plan.end()) it = plan.insert(plan.end(), {nk, {}});
      it->second.push_back(m);
    }
  } else {
    const std::vector<int64_t> ms = a.quick ? std::vector<int64_t>{1, 32, 512} : std::vector<int64_t>{1, 32, 512, 4096};
    for (auto nk : a.quick ? std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}}
                           : std::vector<std::pair<int64_t, int64_t>>{{1024, 1024}, {3072, 1024}, {1024, 3072}})
      plan.push_back({nk, ms});
  }
  int64_t max_m = 0;
  for (const auto& p : plan) max_m = std::max(max_m, *std::max_element(p.second.begin(), p.second.end()));
  std::mt19937 rng(0);
  std::normal_distribution<float> nd(0, 1);
  Progress progress;
  std::vector<Row> rows;
  nlohmann::json packs = nlohmann::json::array();
  std::string impl_bf16, impl_f32;

  progress.show("  measuring the FMA peak");
  const FmaPeak peak = measure_fma_peak(pool);
  for (const auto& [nk, ms] : plan) {
    const auto [n, k] = nk;
    // Weights: a BF16 compute copy, its MXFP8 row quantization, and its FP32 widening.
    std::vector<float> wf(n * k);
    for (auto& v : wf) v = nd(rng) * 0.02f;
    std::vector<uint16_t> wb(n * k);
    for (size_t i = 0; i < wf.size(); ++i) {
      wb[i] = f32_to_bf16(wf[i]);
      wf[i] = bf16_to_f32(wb[i]);
    }
    std::vector<uint8_t> codes(n * k), scales(mx_num_scales(n, k, Axis::Row));
    mx_quantize(wb.data(), InType::BF16, n, k, MxConfig{}, codes.data(), scales.data(), exec);
    const WeightView vb{WFormat::BF16, n, k, wb.data()}, vf{WFormat::F32, n, k, wf.data()};
    WeightView vm{WFormat::MX, n, k, codes.data(), scales.data()};
    vm.elem = ElemType::E4M3;
    PackedWeight pb, pm, pf;
    const double t_pack_bf16 = time_median([&] { pb = PackedWeight::pack(vb, exec); }, 0);
    const double t_pack_mx = time_median([&] { pm = PackedWeight::pack(vm, exec); }, 0);
    const double t_pack_f32 = time_median([&] { pf = PackedWeight::pack(vf, exec); }, 0);
    packs.push_back({{"n", n},
                     {"k", k},
                     {"pack_ms_bf16", t_pack_bf16 * 1e3},
                     {"pack_ms_mx", t_pack_mx * 1e3},
                     {"pack_ms_f32", t_pack_f32 * 1e3},
                     {"packed_bytes_bf16", pb.bytes()},
                     {"packed_bytes_mx", pm.bytes()},
                     {"packed_bytes_f32", pf.bytes()}});

    std::vector<float> x(max_m * k), y(max_m * n), yd(max_m * n);
    for (auto& v : x) v = nd(rng);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);

    for (int64_t m : ms) {
      progress.show(fmt::format("  measuring M={} N={} K={}", m, n, k));
      const double mt = m * n * k > (int64_t(1) << 30) ? 0 : a.min_time;  // the big ones: 5 runs are enough
      Row r{m, n, k, 0, 0, 0, 0, 0, 0, 0};
      r.s_bf16 = time_median([&] { gemm(x.data(), m, pb, y.data(), exec); }, mt);
      r.s_mx = time_median([&] { gemm(x.data(), m, pm, y.data(), exec); }, mt);
      if (amx_cols) {
        r.s_amx_bf16 = time_median([&] { gemm(x.data(), m, pb, y.data(), amx_exec); }, mt);
        r.s_amx_mx = time_median([&] { gemm(x.data(), m, pm, y.data(), amx_exec); }, mt);
      }
      r.s_f32 = time_median([&] { gemm(x.data(), m, pf, y.data(), exec); }, mt);
      // oneDNN has no BF16 matmul on CPUs without AVX-512 (its primitive
      // descriptor fails): that column and its ratios are then NaN (null in JSON).
      try {
        DnnlMatmul db(m, n, k, true, xb.data(), wb.data(), yd.data());
        r.s_dnnl_bf16 = time_median([&] { db.run(); }, mt);
        impl_bf16 = db.impl;
      } catch (const dnnl::error& e) {
        r.s_dnnl_bf16 = std::numeric_limits<double>::quiet_NaN();
        impl_bf16 = fmt::format("none ({})", e.what());
      }
      DnnlMatmul df(m, n, k, false, x.data(), wf.data(), yd.data());
      r.s_dnnl_f32 = time_median([&] { df.run(); }, mt);
      impl_f32 = df.impl;
      rows.push_back(r);
    }
  }
  std::vector<DecodeRow> decode_rows;  // the default set's M = 1 kernel table; not with --shape
  if (a.shapes.empty()) {
    progress.show("  measuring the M = 1 decode kernels");
    decode_rows = decode_kernel_rows(exec, pool.size(), a.min_time);
  }
  progress.clear();

  const Backend be = resolve_backend(Backend::Auto);
  auto gf = [](const Row& r, double s) { return 2.0 * r.m * r.n * r.k / s / 1e9; };
  nlohmann::json j = {{"bench", "gemm"},
                      {"threads", pool.size()},
                      {"backend", backend_name(be)},
                      {"pair_kernel", pair_kernel_summary(a.pair_kernel)},
                      {"provenance", provenance},
                      {"onednn_impl_bf16", impl_bf16},
                      {"onednn_impl_f32", impl_f32},
                      {"mx", "e4m3 rceil row"},
                      {"pack", packs},
                      {"fma_peak",
                       {{"lanes", peak.lanes},
                        {"gflops_one_thread", peak.one_thread},
                        {"gflops_per_thread_all_at_once", peak.all_threads},
                        {"threads", peak.threads}}},
                      {"results", nlohmann::json::array()}};
  if (!a.json) {
    fmt::print(
        "bench gemm: Y = X W^T, X FP32 [M,K], W [N,K]; {} thread(s); median GFLOP/s{}\n{}"
        "oneDNN {}.{}.{}: bf16 impl {}, f32 impl {}\n",
        pool.size(),
        amx_cols ? "; amx-bf16 / amx-mx: the AMX pair kernel (batch-invariant, not the reference chain)" : "",
        bench_provenance_text(provenance),
        dnnl_version()->major, dnnl_version()->minor, dnnl_version()->patch, impl_bf16, impl_f32);
    if (peak.lanes > 0)
      fmt::print("FP32 FMA peak, {}-lane FMAs in a loop: {:.1f} GFLOP/s on one thread, {:.1f} per thread with all {} "
                 "at once ({:.1f} in all)\n",
                 peak.lanes, peak.one_thread, peak.all_threads, peak.threads, peak.all_threads * peak.threads);
    fmt::print("{:>5} {:>5} {:>5} | {:>8} {:>8} {:>8} | {:>9} {:>9} | {:>8} {:>8} {:>8} {:>9}", "M", "N", "K", "bf16",
               "mxfp8", "f32", "dnnl-bf16", "dnnl-f32", "bf16/df", "mx/df", "f32/df", "bf16/dbf");
    if (amx_cols) fmt::print(" | {:>8} {:>8} {:>9}", "amx-bf16", "amx-mx", "amxb/dbf");
    fmt::print("\n");
  }
  for (const Row& r : rows) {
    const double g[5] = {gf(r, r.s_bf16), gf(r, r.s_mx), gf(r, r.s_f32), gf(r, r.s_dnnl_bf16), gf(r, r.s_dnnl_f32)};
    j["results"].push_back(
        {{"m", r.m},
         {"n", r.n},
         {"k", r.k},
         {"gflops",
          {{"mxrl_bf16", g[0]}, {"mxrl_mxfp8", g[1]}, {"mxrl_f32", g[2]}, {"onednn_bf16", g[3]}, {"onednn_f32", g[4]}}},
         {"seconds",
          {{"mxrl_bf16", r.s_bf16},
           {"mxrl_mxfp8", r.s_mx},
           {"mxrl_f32", r.s_f32},
           {"onednn_bf16", r.s_dnnl_bf16},
           {"onednn_f32", r.s_dnnl_f32}}},
         {"ratio_to_onednn_f32", {{"mxrl_bf16", g[0] / g[4]}, {"mxrl_mxfp8", g[1] / g[4]}, {"mxrl_f32", g[2] / g[4]}}},
         {"ratio_to_onednn_bf16", {{"mxrl_bf16", g[0] / g[3]}, {"mxrl_mxfp8", g[1] / g[3]}}}});
    if (amx_cols) {
      const double ab = gf(r, r.s_amx_bf16), am = gf(r, r.s_amx_mx);
      auto& res = j["results"].back();
      res["gflops"]["mxrl_amx_bf16"] = ab;
      res["gflops"]["mxrl_amx_mxfp8"] = am;
      res["seconds"]["mxrl_amx_bf16"] = r.s_amx_bf16;
      res["seconds"]["mxrl_amx_mxfp8"] = r.s_amx_mx;
      res["ratio_to_onednn_bf16"]["mxrl_amx_bf16"] = ab / g[3];
      res["ratio_to_onednn_bf16"]["mxrl_amx_mxfp8"] = am / g[3];
    }
    if (!a.json) {
      fmt::print(
          "{:>5} {:>5} {:>5} | {:>8.1f} {:>8.1f} {:>8.1f} | {:>9.1f} {:>9.1f} | {:>8.2f} {:>8.2f} {:>8.2f} {:>9.2f}",
          r.m, r.n, r.k, g[0], g[1], g[2], g[3], g[4], g[0] / g[4], g[1] / g[4], g[2] / g[4], g[0] / g[3]);
      if (amx_cols)
        fmt::print(" | {:>8.1f} {:>8.1f} {:>9.2f}", gf(r, r.s_amx_bf16), gf(r, r.s_amx_mx), gf(r, r.s_amx_bf16) / g[3]);
      fmt::print("\n");
    }
  }
  j["decode_kernels"] = nlohmann::json::array();
  for (const DecodeRow& r : decode_rows)
    j["decode_kernels"].push_back({{"threads", r.threads},
                                   {"n", r.n},
                                   {"k", r.k},
                                   {"gbs_bf16", r.gbs_bf16},
                                   {"gbs_mx_lut", r.gbs_lut},
                                   {"gbs_mx_shift", r.gbs_shift},
                                   {"lut_enabled", detail::pair_lut_enabled()}});
  if (!a.json && !decode_rows.empty())
    fmt::print("M = 1, GB/s of packed weight bytes (the better of 2 interleaved medians); mx-lut: table-lookup E4M3 "
               "decode{}, mx-shift: shift-and-multiply decode (same bits)\n",
               detail::pair_lut_enabled() ? "" : " (NOT available here: no AVX512_VBMI; both columns are mx-shift)");
  if (!a.json) {
    if (!decode_rows.empty())
      fmt::print("{:>7} {:>6} {:>5} | {:>8} {:>8} {:>8} | {:>9} {:>9}\n", "threads", "N", "K", "bf16", "mx-lut",
                 "mx-shift", "lut/shift", "lut/bf16");
    for (const DecodeRow& r : decode_rows)
      fmt::print("{:>7} {:>6} {:>5} | {:>8.1f} {:>8.1f} {:>8.1f} | {:>9.2f} {:>9.2f}\n", r.threads, r.n, r.k, r.gbs_bf16,
                 r.gbs_lut, r.gbs_shift, r.gbs_lut / r.gbs_shift, r.gbs_lut / r.gbs_bf16);
    fmt::print("pack (not in the figures above), median ms:\n");
    for (const auto& p : packs)
      fmt::print("  N={} K={}: bf16 {:.2f} ms ({:.1f} MiB), mxfp8 {:.2f} ms ({:.1f} MiB), f32 {:.2f} ms ({:.1f} MiB)\n",
                 p["n"].get<int64_t>(), p["k"].get<int64_t>(), p["pack_ms_bf16"].get<double>(),
                 p["packed_bytes_bf16"].get<double>() / (1 << 20), p["pack_ms_mx"].get<double>(),
                 p["packed_bytes_mx"].get<double>() / (1 << 20), p["pack_ms_f32"].get<double>(),
                 p["packed_bytes_f32"].get<double>() / (1 << 20));
  } else {
    fmt::print("{}\n", j.dump());
  }
}

}  // namespace mxrl
