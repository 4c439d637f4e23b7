// `mxrl report`: the three experiments of the paper's claims (docs/reference.md §1) on
// this machine, written as JSON under one directory and rendered into
// README.md with PNG plots by scripts/report.py (matplotlib):
//   matching.json  what matching buys: exact KL per sampler configuration
//                  with bootstrap CIs, and the paper's three figures;
//   rl_kl.json     the exact KL and reward per RL step, several seeds;
//   speed.json     the micro-batch sweep with its fit, and the RL step-time
//                  split for the bf16 and mxfp8 recipes with matching samplers;
//   faults/        the fault matrix (experiments/fault_matrix.h);
//   engine.json    (part "engine", asked for by name) a live vLLM engine as the
//                  sampler: exact KL per configuration with bootstrap CIs, and
//                  engine_speed.json, generation throughput beside mxrl's sampler
//                  (mxrl-vllm experiment / bench, python/adapters/vllm);
//   report.json    mode, wall time, date, machine.
// Warm starts (SFT-trained tiny dense and MoE presets) are trained under
// DIR/warm/ unless given. --quick runs every part at a size small enough for
// CI (about a minute); its figures show the pipeline works, nothing more.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/exec.h"

namespace mxrl {

struct ReportConfig {
  std::string out = "reports";
  bool quick = false;
  std::vector<std::string> parts = {"matching", "rl-kl", "speed", "faults"};
  std::string dense_model, moe_model;  // warm starts ("" : trained under out/warm/)
  std::string task = "addition:digits=3";
  int64_t sft_steps = 0;   // 0: 800 (quick: 30)
  bool qwen_shape = true;  // speed: also time RL steps on the Qwen3-0.6B shape (full mode)
  std::string python = "/usr/bin/python3";
  std::string script;  // "" : the source tree's scripts/report.py
  // The engine part (not among the default parts): a Python with vLLM and mxrl-vllm
  // ("" : default_engine_python()).
  std::string engine_python;
  bool render = true;  // run the script after the experiments
};

std::vector<std::string> report_parts();  // matching, rl-kl, speed, faults, engine
// The Python with vLLM and mxrl-vllm that the engine part and `mxrl diverge` run:
// the source tree's build-py/venv/bin/python (scripts/vllm.sh makes it).
std::string default_engine_python();

// Runs the parts, writes their JSON into cfg.out (atomically), then renders.
// `progress` gets one line per measurement.
void run_report(const ReportConfig& cfg, const std::function<void(const std::string&)>& progress,
                const Exec& exec = {});
// Runs the script on a directory of experiment JSON (README.md and PNGs).
void render_report(const std::string& dir, const std::string& python, const std::string& script);

}  // namespace mxrl
