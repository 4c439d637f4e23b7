// --config FILE.toml for a subcommand: each top-level key sets the option of
// the same name (prompts_per_step = 16 sets --prompts-per-step), unless that
// option was given on the command line (flags override the file). A list
// option (--inject, --presets) takes an array. Unknown keys, tables, and
// values of the wrong type (a float for an integer option,
// a string for a flag, ...) are one-line errors naming the file and the key;
// the option's own checks (ranges, choices) apply as on the command line.
// For sft, rl and demo the setting options are those of the settings tables
// (cli/settings_cli.h), so the keys are the tables' flags with _ for -.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace mxrl {

void apply_config_file(CLI::App* cmd, const std::string& path);

}  // namespace mxrl
