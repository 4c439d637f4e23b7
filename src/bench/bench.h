// The benchmarks behind `mxrl bench ...`: each measures mxrl beside a
// baseline measured in the same run (memcpy, oneDNN, raw MPI, the first plan
// or recipe) and prints a table, or one JSON object on the last line, on
// stdout. The CLI (cli/bench_cmd.cc) parses the options into these structs
// and calls run_*; the defaults here are the CLI's.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/train_sweep.h"
#include "util/cpu.h"

namespace mxrl {

// MX quantize/dequantize GB/s beside memcpy of the same bytes (bench_quantize.cc).
struct BenchQuantizeOptions {
  int threads = 1;
  bool json = false;
  int size_mib = 64;
  std::string elem = "e4m3";
  double min_time = 0.3;
};
void bench_quantize(const BenchQuantizeOptions& a);

// GEMM GFLOP/s (BF16, MXFP8, FP32 weights) beside oneDNN BF16 and FP32 matmul (bench_gemm.cc).
struct BenchGemmOptions {
  int threads = 0;
  PairKernel pair_kernel = PairKernel::Auto;  // the bf16 and mxfp8 columns' (Exec::pair_kernel)
  bool json = false;
  bool quick = false;
  double min_time = 0.2;
  // Shapes {M, N, K} to measure instead of the default set (--shape MxNxK).
  std::vector<std::array<int64_t, 3>> shapes;
};
void bench_gemm(const BenchGemmOptions& a);

// Forward (prefill) tokens/s of a preset model under several plans (bench_forward.cc).
struct BenchForwardOptions {
  std::string preset = "tiny-dense";
  std::vector<std::string> plans = {"fp32", "bf16", "mxfp8"};
  int64_t batch = 8, seq_len = 128;
  int threads = 0;
  bool json = false;
};
void bench_forward(const BenchForwardOptions& a);

// Prefill and decode tokens/s, and decode memory bandwidth beside memcpy (bench_decode.cc).
struct BenchDecodeOptions {
  std::string shape = "tiny-dense";
  std::vector<std::string> plans = {"bf16", "mxfp8"};
  std::vector<int64_t> batches = {1, 32};
  int64_t prompt_len = 128, steps = 32, prefill_reps = 3;
  int threads = 0;
  PairKernel pair_kernel = PairKernel::Auto;
  bool json = false;
};
void bench_decode(const BenchDecodeOptions& a);

// Training tokens/s per recipe, split by phase; sweep: the per-micro-batch and
// per-token costs fitted (bench_train.cc; the measurement is
// experiments/train_sweep.h, which the report runs too).
struct BenchTrainOptions {
  TrainBenchConfig cfg;
  int64_t micro_batch_tokens = 4096;
  std::vector<int64_t> budgets = {512, 1024, 2048, 4096, 8192, 16384};
  bool sweep = false, json = false;
  int threads = 0;
  PairKernel pair_kernel = PairKernel::Auto;
};
void bench_train(BenchTrainOptions a);

// Weight-sync bytes and time over MPI beside raw MPI bandwidth, under
// `mpirun -np 2` (bench_sync.cc).
struct BenchSyncOptions {
  std::vector<std::string> shapes = {"tiny-dense", "tiny-moe", "qwen3-0.6b"};
  int64_t chunk_bytes = 1 << 20;
  int reps = 5;
  int threads = 0;
  bool json = false;
};
void bench_sync(const BenchSyncOptions& a);

}  // namespace mxrl
