// The options of a command that writes a run folder (sft, rl): where the run
// starts (--model, --data, --resume), its settings file (--config) and its
// folder (--out, --overwrite), and the RunSpec the library opens them from.
#pragma once
#include <fmt/format.h>

#include <string>

#include <CLI/CLI.hpp>

#include "cli/config_file.h"
#include "train/run_setup.h"
#include "util/error.h"

namespace mxrl {

struct RunFolderArgs {
  std::string model, data, resume, config;
  bool overwrite = false;
};

inline void add_run_folder_options(CLI::App* c, RunFolderArgs& r, std::string& out, const char* model_help) {
  c->add_option("--model", r.model, model_help)->check(CLI::ExistingDirectory);
  c->add_option("--data", r.data, "JSONL dataset: {\"prompt\": ..., \"answer\": ...} per line")
      ->check(CLI::ExistingFile);
  c->add_option("--resume", r.resume, "Training-state directory to continue (its settings are kept)")
      ->check(CLI::ExistingDirectory);
  c->add_option("--config", r.config, "TOML file of settings (keys: the long options, _ for -); flags override it")
      ->check(CLI::ExistingFile);
  c->add_option("--out", out, "Output directory (required): step-NNNNNN/ every --save-every steps, and final/");
  c->add_flag("--overwrite", r.overwrite,
              "Start a new run in an --out that holds another run's checkpoints (they are removed)");
}

// Applies --config (flags on the command line win) and requires an --out.
inline void apply_run_config(CLI::App* c, const RunFolderArgs& r, const std::string& out) {
  if (!r.config.empty()) apply_config_file(c, r.config);
  if (out.empty()) fail("give --out DIR (on the command line or as out = \"DIR\" in --config)");
}

// Notes of the run set-up (leftovers removed, checkpoints overwritten) go to stderr.
inline RunSpec run_spec(const RunFolderArgs& r, const std::string& out, const CLI::App* c) {
  return RunSpec{r.model, r.resume, r.data, c->count("--task") > 0, out, r.overwrite, [](const std::string& note) {
                   fmt::print(stderr, "{}\n", note);
                 }};
}

}  // namespace mxrl
