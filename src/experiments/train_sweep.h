// Training speed per recipe (bf16, mxfp8) on identical data, with the step
// split into weight quantization, activation quantization, GEMMs, attention,
// AdamW and the rest; and the micro-batch sweep that says when MXFP8 pays off.
//
// Sweep: for each micro-batch token budget B, one optimizer step over the
// same T tokens cut into k = ceil(T / B) micro-batches. The time of one
// micro-batch is
//     c(B) = (step - adamw - weight quantization made once per step) / k
// (with requant_every_microbatch the weight quantizations are made per
// micro-batch and stay in c), and per recipe c(B) = fixed + B * per_token is
// fitted by least squares over the sweep. A recipe is cheaper than the first
// (the baseline) from B* = (fixed - fixed_base) / (per_token_base - per_token)
// on, when that is positive (and never, or always, otherwise). A fitted fixed
// cost below zero means none is resolved: the per-token cost grows with B.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/exec.h"

namespace mxrl {

struct TrainBenchConfig {
  std::string preset = "tiny-dense";
  std::vector<std::string> recipes = {"bf16", "mxfp8"};  // the first is the baseline
  int64_t tokens = 16384, seq_len = 128, reps = 2;
  std::vector<int64_t> budgets = {4096};  // more than one: a sweep with fits
  bool requant_every_microbatch = false;
};

// Least squares y = a + b x, and its coefficient of determination.
struct Line {
  double a = 0, b = 0, r2 = 0;
};
Line fit_line(const std::vector<double>& x, const std::vector<double>& y);

// {"bench": "train", "preset", "tokens", "seq_len", "threads", "params", "requant_every_microbatch",
//  "results": [{"recipe", "budget", "tokens_per_s", "step_s", "weight_quant_s", "act_quant_s", "gemm_s",
//               "attention_s", "optimizer_s", "rest_s", "micro_batches", "ratio_to_first", "microbatch_s",
//               "microbatch_tokens"}],
//  and with two or more budgets "fits": {recipe: {"fixed_per_microbatch_s", "per_token_s", "r2"}},
//  "crossover": {recipe: {"vs", "tokens", "verdict", "measured"}}}.
// Budgets outer, recipes inner (each ratio compares runs made close in time:
// this machine drifts by +-20% over a sweep). on_result gets each result.
nlohmann::json bench_train(const TrainBenchConfig& cfg, const std::function<void(const nlohmann::json&)>& on_result,
                           const Exec& exec = {});

// One training step of `recipe` (after a warm-up step) as Chrome trace-event
// JSON: the quantization, GEMM, attention, optimizer and allocation phases as
// spans on each thread, and the whole step on the main thread.
// Micro-batches of budgets[0] tokens.
std::string trace_train_step(const TrainBenchConfig& cfg, const std::string& recipe, const Exec& exec = {});

}  // namespace mxrl
