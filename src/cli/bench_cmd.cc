// mxrl bench ...: the options of each benchmark; the bodies are the bench
// library's (bench/bench.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <memory>
#include <string>

#include "bench/bench.h"
#include "cli/commands.h"
#include "model/init.h"

namespace mxrl {

namespace {

// "MxNxK" as {M, N, K}, each a positive integer (--shape of bench gemm).
std::array<int64_t, 3> parse_gemm_shape(const std::string& s) {
  std::array<int64_t, 3> v{};
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const size_t end = i < 2 ? s.find('x', pos) : s.size();
    const std::string part = end == std::string::npos ? std::string() : s.substr(pos, end - pos);
    const bool digits = !part.empty() && part.size() <= 9 && part.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || (v[i] = std::stoll(part)) < 1)
      throw CLI::ValidationError("--shape", fmt::format("'{}' is not MxNxK with M, N, K positive integers below 10^9", s));
    pos = end + 1;
  }
  return v;
}

void add_bench_quantize(CLI::App* bench) {
  auto a = std::make_shared<BenchQuantizeOptions>();
  auto* q = bench->add_subcommand("quantize", "MX quantize/dequantize GB/s beside memcpy of the same bytes");
  q->add_option("--threads", a->threads, "Worker threads (0: all cores)")->check(non_negative())->capture_default_str();
  q->add_flag("--json", a->json, "Print one JSON object (last line) instead of a table");
  q->add_option("--size-mib", a->size_mib, "FP32 input size in MiB")->check(CLI::Range(1, 4096))->capture_default_str();
  q->add_option("--elem", a->elem, "Element type")
      ->check(CLI::IsMember({"e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}))
      ->capture_default_str();
  q->add_option("--min-time", a->min_time, "Minimum seconds per measurement")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  q->callback([a] { bench_quantize(*a); });
}

void add_bench_gemm(CLI::App* bench) {
  auto a = std::make_shared<BenchGemmOptions>();
  auto kernels = std::make_shared<std::string>("auto");
  auto* g =
      bench->add_subcommand("gemm", "GEMM GFLOP/s (BF16, MXFP8, FP32 weights) beside oneDNN BF16 and FP32 matmul");
  add_threads_option(g, &a->threads);
  add_kernels_option(g, kernels.get());
  g->add_flag("--json", a->json, "Print one JSON object (last line) instead of a table");
  g->add_flag("--quick", a->quick, "Fewer shapes (M in {1, 32, 512}, N = K = 1024)");
  g->add_option_function<std::vector<std::string>>(
      "--shape",
      [a](const std::vector<std::string>& v) {
        for (const std::string& s : v) a->shapes.push_back(parse_gemm_shape(s));
      },
      "Measure this shape MxNxK (Y[M,N] = X[M,K] W[N,K]^T, K a multiple of 32) instead of the default set "
      "(and without the M = 1 kernel table); repeatable");
  g->add_option("--min-time", a->min_time, "Minimum seconds per measurement")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  g->callback([a, kernels] {
    a->pair_kernel = pair_kernel_from_name(*kernels);
    bench_gemm(*a);
  });
}

void add_bench_forward(CLI::App* bench) {
  auto a = std::make_shared<BenchForwardOptions>();
  auto* c = bench->add_subcommand("forward", "Forward (prefill) tokens/s of a preset model under several plans");
  c->add_option("--preset", a->preset, "Preset model")->check(CLI::IsMember(preset_names()))->capture_default_str();
  c->add_option("--plans", a->plans, "Plans to compare (the first is the baseline)")->capture_default_str();
  c->add_option("--batch", a->batch, "Sequences")->check(at_least(1))->capture_default_str();
  c->add_option("--seq-len", a->seq_len, "Tokens per sequence")->check(CLI::Range(2, 1024))->capture_default_str();
  add_threads_option(c, &a->threads);
  c->add_flag("--json", a->json, "One JSON object on the last line");
  c->callback([a] { bench_forward(*a); });
}

void add_bench_decode(CLI::App* bench) {
  auto a = std::make_shared<BenchDecodeOptions>();
  auto kernels = std::make_shared<std::string>("auto");
  auto* c = bench->add_subcommand("decode", "Prefill and decode tokens/s, and decode memory bandwidth beside memcpy");
  c->add_option("--shape", a->shape,
                "Model shape, random weights: " + fmt::format("{}", fmt::join(shape_names(), ", ")))
      ->check(CLI::IsMember(shape_names()))
      ->capture_default_str();
  c->add_option("--plan", a->plans, "Plan (name or .toml), repeatable; the first is the baseline")
      ->take_all()
      ->capture_default_str();
  c->add_option("--batch", a->batches, "Sequences per forward call, repeatable")
      ->take_all()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  c->add_option("--prompt-len", a->prompt_len, "Prompt tokens per sequence")
      ->check(CLI::Range(int64_t{1}, int64_t{32768}))
      ->capture_default_str();
  c->add_option("--steps", a->steps, "Decode steps")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  c->add_option("--prefill-reps", a->prefill_reps, "Prefill repetitions (median)")
      ->check(CLI::Range(int64_t{1}, int64_t{100}))
      ->capture_default_str();
  add_threads_option(c, &a->threads);
  add_kernels_option(c, kernels.get());
  c->add_flag("--json", a->json, "One JSON object on the last line");
  c->callback([a, kernels] {
    a->pair_kernel = pair_kernel_from_name(*kernels);
    bench_decode(*a);
  });
}

void add_bench_train(CLI::App* bench) {
  auto a = std::make_shared<BenchTrainOptions>();
  auto kernels = std::make_shared<std::string>("auto");
  auto* c = bench->add_subcommand(
      "train", "Training tokens/s per recipe, split by phase; --sweep fits the per-micro-batch and per-token costs");
  c->add_option("--preset", a->cfg.preset, "Preset model")->check(CLI::IsMember(preset_names()))->capture_default_str();
  c->add_option("--recipe", a->cfg.recipes, "Recipes to compare (the first is the baseline)")->capture_default_str();
  c->add_option("--tokens", a->cfg.tokens, "Tokens per optimizer step")->check(at_least(1))->capture_default_str();
  c->add_option("--micro-batch-tokens", a->micro_batch_tokens, "Micro-batch budget (without --sweep)")
      ->check(at_least(1))
      ->capture_default_str();
  c->add_option("--seq-len", a->cfg.seq_len, "Tokens per sequence")->check(at_least(1))->capture_default_str();
  c->add_option("--budgets", a->budgets, "Sweep budgets")->capture_default_str();
  c->add_option("--reps", a->cfg.reps, "Timed steps per point (median)")->check(at_least(1))->capture_default_str();
  c->add_flag("--requant-every-microbatch", a->cfg.requant_every_microbatch,
              "Remake the weight quantizations every micro-batch (counted in the micro-batch's fixed cost)");
  c->add_flag("--sweep", a->sweep, "Sweep the micro-batch budget and fit fixed and per-token costs");
  c->add_flag("--json", a->json, "One JSON object on stdout");
  add_threads_option(c, &a->threads);
  add_kernels_option(c, kernels.get());
  c->callback([a, kernels] {
    a->pair_kernel = pair_kernel_from_name(*kernels);
    bench_train(*a);
  });
}

void add_bench_sync(CLI::App* bench) {
  auto a = std::make_shared<BenchSyncOptions>();
  auto* c = bench->add_subcommand(
      "sync", "Weight-sync bytes and time over MPI (mxfp8 vs bf16 sampler) beside raw MPI bandwidth: mpirun -np 2");
  c->add_option("--shapes", a->shapes, "Model shapes (tiny-dense, tiny-moe, qwen3-0.6b)")->capture_default_str();
  c->add_option("--chunk-bytes", a->chunk_bytes, "Payload bytes per chunk")->check(at_least(1))->capture_default_str();
  c->add_option("--reps", a->reps, "Measured repetitions of each (after one warm-up)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  c->add_option("--threads", a->threads, "Worker threads for building the bundles (0: all cores)")
      ->check(non_negative());
  c->add_flag("--json", a->json, "Also print one JSON object (last line)");
  c->callback([a] { bench_sync(*a); });
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (figures beside a baseline measured in the same run)");
  bench->require_subcommand(1);
  add_bench_quantize(bench);
  add_bench_gemm(bench);
  add_bench_forward(bench);
  add_bench_decode(bench);
  add_bench_train(bench);
  add_bench_sync(bench);
}

}  // namespace mxrl
