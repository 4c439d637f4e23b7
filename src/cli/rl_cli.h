// The RL front end shared by `mxrl rl` and `mxrl demo`: options, progress
// display, metrics file, the summary.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "train/grpo.h"

namespace mxrl {

struct RlCliArgs {
  RlConfig cfg;
  std::string out, metrics;
  int64_t log_every = 10;
  int threads = 0;
  std::string kernels = "auto";    // --kernels
  int learners = 0, samplers = 0;  // distributed (mpirun): 0 and 0 = colocated
};

struct RlCliResult {
  std::vector<EvalResult> evals;  // before RL first, after RL last
  double seconds = 0;
  int64_t steps = 0;
};

// The run-setting options of RL (task, GRPO, sync, checks, learner): the
// fields of rl_fields(), bound to a.cfg.
void add_rl_options(CLI::App* c, RlCliArgs& a);
RlCliResult run_rl_cli(const RlCliArgs& a, RlRun& run);

}  // namespace mxrl
