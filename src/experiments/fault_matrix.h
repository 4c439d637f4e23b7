// The fault matrix (`mxrl faults`): every sync fault of faults/faults.h on
// short GRPO runs from SFT warm starts, dense and MoE, each run twice:
//   checks on (warn): which checks fire, at which version relative to the
//     injection (the first opportunity is the sync of the injection step);
//   checks off: does the run show anything at all (an error, NaN, a visible
//     reward drop)? If not, the fault is silent. Its effect on the exact KL,
//     max |dlogp| and reward is measured against the clean run of the same
//     seed.
// Written as faults.json and faults.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "faults/faults.h"
#include "util/exec.h"

namespace mxrl {

struct FaultMatrixConfig {
  std::string dense_model, moe_model;  // warm-start checkpoints ("" skips that preset)
  std::string dense_recipe = "mxfp8";
  std::string moe_recipe = "mxfp8";  // a plan whose router is FP32 lets router-bf16 apply
  std::string task = "addition:digits=3";
  int64_t steps = 8, inject_step = 3;
  int64_t prompts_per_step = 16, samples_per_prompt = 8;
  double lr = 1e-4;
  uint64_t seed = 1;
  double visible_drop = 0.1;      // reward drop (absolute) that counts as visible
  std::vector<std::string> only;  // fault names to run (empty: all)
};

// One run's measured course, steps after the injection (and at it).
struct RunTrace {
  bool crashed = false;
  std::string error;                                   // an exception that ended the run
  std::vector<double> reward, kl_mean, abs_dlogp_max;  // per step
  std::vector<std::string> sync_errors;                // syncs the sampler refused
  std::map<std::string, int64_t> first_fired;          // check -> first version it fired at
  std::map<std::string, std::string> first_finding;    // check -> its first finding then
  bool nan = false;
};

struct FaultRow {
  std::string preset, fault, seam;
  int condition = 0;
  bool applicable = true;
  std::string skipped;                   // why not run, when not applicable
  std::map<std::string, int64_t> fired;  // check -> version - inject_step (0: first opportunity)
  std::map<std::string, std::string> findings;
  std::vector<std::string> missed;  // checks that never fired
  bool first_opportunity = false;   // some check fired at the first sync after the injection
  bool silent = false;              // checks off: no error, no NaN, no visible reward drop
  std::string visible;              // what showed, when not silent
  double kl_fault = 0, kl_clean = 0, dlogp_fault = 0, dlogp_clean = 0, reward_fault = 0, reward_clean = 0;
  RunTrace fault_trace, clean_trace;  // checks off: the course over the steps after the injection
  nlohmann::json to_json() const;
};

struct FaultMatrix {
  FaultMatrixConfig cfg;
  std::vector<FaultRow> rows;
  nlohmann::json to_json() const;
  std::string to_markdown() const;
};

// Runs the matrix; `progress` gets one line per run.
FaultMatrix run_fault_matrix(const FaultMatrixConfig& cfg, const std::function<void(const std::string&)>& progress,
                             const Exec& exec = {});
// Writes dir/mxfp8-router-fp32.toml (MXFP8 linears, an FP32 router: the MoE
// recipe under which router-bf16 applies) and its +fp8kv twin; returns the first.
std::string write_router_fp32_plan(const std::string& dir);
// faults.json and faults.md into dir (atomically).
void write_fault_matrix(const FaultMatrix& m, const std::string& dir);

}  // namespace mxrl
