// The SFT front end shared by `mxrl sft` and `mxrl demo`: options, progress
// display, metrics file, final samples.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "train/sft.h"

namespace mxrl {

struct SftCliArgs {
  SftConfig cfg;
  std::string out, metrics;
  int64_t samples = 8, log_every = 10;
  int threads = 0;
  std::string kernels = "auto";  // --kernels
};

struct SftCliResult {
  EvalResult eval;
  double seconds = 0;
  int64_t tokens = 0;
};

// Registers the run-setting options (task, steps, recipe, optimizer, eval) on
// c: the fields of sft_fields(), bound to a.cfg.
void add_sft_options(CLI::App* c, SftCliArgs& a);
// Runs `run` to its end with progress on stderr, metrics, and samples on stdout.
SftCliResult run_sft_cli(const SftCliArgs& a, SftRun& run);

}  // namespace mxrl
