// mxrl bench quantize: MX quantize/dequantize throughput beside memcpy of the
// same bytes, measured in the same run with the same threads.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct Result {
  std::string op;
  double bytes_in;  // input bytes per run
  double elems;
  double seconds;
};
}  // namespace

void bench_quantize(const BenchQuantizeOptions& a) {
  const nlohmann::json provenance = bench_provenance(PairKernel::Auto, /*uses_gemm=*/false);
  ThreadPool pool(a.threads);
  const auto elem = *elem_from_name(a.elem);
  const int64_t cols = 4096, rows = std::max<int64_t>(32, int64_t(a.size_mib) * (1 << 20) / 4 / cols / 32 * 32);
  const int64_t n = rows * cols;
  std::vector<float> x(n), copy(n), y(n);
  std::vector<uint8_t> codes(n), scales(mx_num_scales(rows, cols, Axis::Row));
  std::mt19937 rng(0);
  std::normal_distribution<float> nd(0, 1);
  for (auto& v : x) v = nd(rng);
  const Exec exec{&pool, Backend::Auto};
  const double fbytes = 4.0 * n;
  auto memcpy_par = [&] {
    pool.parallel_for(
        n, [&](int64_t b, int64_t e) { std::memcpy(copy.data() + b, x.data() + b, (e - b) * sizeof(float)); }, 1 << 16);
  };
  auto quant = [&](Axis axis, Rounding r, Backend be, InType in = InType::F32) {
    return [&, axis, r, be, in] {
      MxConfig cfg{elem, ScaleRule::RCeil, axis, r, 1};
      mx_quantize(x.data(), in, rows, cols, cfg, codes.data(), scales.data(), {&pool, be});
    };
  };
  std::vector<uint16_t> bf(n);
  std::vector<Result> res;
  Progress progress;
  auto run = [&](const std::string& op, double bytes, const std::function<void()>& fn, double min_time) {
    progress.show("  measuring " + op);
    res.push_back({op, bytes, static_cast<double>(n), time_median(fn, min_time)});
  };
  run("memcpy", fbytes, memcpy_par, a.min_time);
  run("quantize row (rne)", fbytes, quant(Axis::Row, Rounding::RNE, Backend::Auto), a.min_time);
  // A model's MX prepare: the codes of the BF16 copy, each FP32 weight rounded
  // as it is read; beside it, the BF16 prepare's pass (FP32 to BF16 bits).
  run("quantize row (rne, as BF16)", fbytes, quant(Axis::Row, Rounding::RNE, Backend::Auto, InType::F32AsBF16),
      a.min_time);
  run("bf16 encode", fbytes, [&] { bf16_encode(x.data(), n, bf.data(), exec); }, a.min_time);
  run("quantize col (rne)", fbytes, quant(Axis::Col, Rounding::RNE, Backend::Auto), a.min_time);
  run("quantize row (stochastic)", fbytes, quant(Axis::Row, Rounding::Stochastic, Backend::Auto), a.min_time);
  run(
      "dequantize row", double(n) + double(scales.size()),
      [&] { mx_dequantize(codes.data(), scales.data(), rows, cols, elem, Axis::Row, y.data(), exec); }, a.min_time);
  // A training step's activations and gradients on the MX grid (one pass),
  // beside the quantize-then-dequantize it replaces (same bits).
  const MxConfig row_rne{elem, ScaleRule::RCeil, Axis::Row, Rounding::RNE, 1};
  run(
      "round trip row (rne)", fbytes, [&] { mx_round_trip_rows(x.data(), rows, cols, row_rne, y.data(), exec); },
      a.min_time);
  run(
      "quantize + dequantize row", fbytes,
      [&] {
        mx_quantize(x.data(), InType::F32, rows, cols, row_rne, codes.data(), scales.data(), exec);
        mx_dequantize(codes.data(), scales.data(), rows, cols, elem, Axis::Row, y.data(), exec);
      },
      a.min_time);
  run("quantize row, scalar ref", fbytes, quant(Axis::Row, Rounding::RNE, Backend::Scalar), 0);

  progress.clear();
  const double memcpy_gbps = res[0].bytes_in / res[0].seconds / 1e9;
  const Backend be = resolve_backend(Backend::Auto);
  nlohmann::json j = {{"bench", "quantize"},         {"threads", pool.size()},
                      {"backend", backend_name(be)}, {"elem", a.elem},
                      {"scale_rule", "rceil"},       {"shape", {rows, cols}},
                      {"memcpy_gbps", memcpy_gbps},  {"provenance", provenance},
                      {"results", nlohmann::json::array()}};
  if (!a.json)
    fmt::print(
        "bench quantize: {} x {} FP32 ({:.0f} MiB), {} {}, backend {}, {} thread(s); median times\n{}"
        "{:<28} {:>10} {:>10} {:>10}\n",
        rows, cols, fbytes / (1 << 20), a.elem, "rceil", backend_name(be), pool.size(),
        bench_provenance_text(provenance), "op", "GB/s in", "Gelem/s", "x memcpy");
  for (const Result& r : res) {
    const double gbps = r.bytes_in / r.seconds / 1e9;
    j["results"].push_back({{"op", r.op},
                            {"seconds", r.seconds},
                            {"gbps_input", gbps},
                            {"gelem_per_s", r.elems / r.seconds / 1e9},
                            {"ratio_to_memcpy", gbps / memcpy_gbps}});
    if (!a.json)
      fmt::print("{:<28} {:>10.2f} {:>10.3f} {:>10.2f}\n", r.op, gbps, r.elems / r.seconds / 1e9, gbps / memcpy_gbps);
  }
  if (a.json) fmt::print("{}\n", j.dump());
}
}  // namespace mxrl
