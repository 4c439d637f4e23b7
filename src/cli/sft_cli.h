// The SFT front end shared by `mxrl sft` and `mxrl demo`: options, progress
// display, metrics file, final samples.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "rl/sft.h"

namespace mxrl::cli {

struct SftCliArgs {
  rl::SftConfig cfg;
  std::string schedule = "constant";
  std::string out, metrics;
  int64_t samples = 8, log_every = 10;
  int threads = 0;
  std::string kernels = "auto";  // --kernels
};

struct SftCliResult {
  rl::EvalResult eval;
  double seconds = 0;
  int64_t tokens = 0;
};

// The learner's options (recipe, micro-batches, optimizer), shared by sft, rl and demo.
void add_learner_options(CLI::App* c, LearnerConfig& l, std::string& schedule);
const std::vector<const char*>& learner_option_names();  // their flags, for --resume refusals
inline void apply_schedule(LearnerConfig& l, const std::string& schedule) {
  l.optim.schedule = schedule == "cosine" ? LrSchedule::Cosine : LrSchedule::Constant;
}

// Registers the run-setting options (task, steps, recipe, optimizer, eval) on c.
void add_sft_options(CLI::App* c, SftCliArgs& a);
// Settles options that need more than a plain field (the schedule).
void apply_sft_options(SftCliArgs& a);
// Runs `run` to its end with progress on stderr, metrics, and samples on stdout.
SftCliResult run_sft_cli(const SftCliArgs& a, rl::SftRun& run);

}  // namespace mxrl::cli
