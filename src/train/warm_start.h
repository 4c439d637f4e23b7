// Fresh checkpoints and SFT warm starts, shared by `mxrl init`, the demo, the
// fault matrix and the experiments.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "io/safetensors.h"
#include "model/config.h"
#include "util/exec.h"

namespace mxrl {

// A randomly initialised checkpoint of `cfg` with the built-in character
// tokenizer (its end-of-text token as eos and bos) in `out`. Throws when the
// config's vocabulary is smaller than the tokenizer's. Returns the parameter count.
int64_t init_checkpoint(const std::string& out, ModelConfig cfg, uint64_t seed, float std = 0.02f,
                        DType dtype = DType::F32);
// The same for a preset (model/init.h).
void write_preset_checkpoint(const std::string& out, const std::string& preset, uint64_t seed, float std = 0.02f);

struct WarmStartConfig {
  std::string preset = "tiny-dense";
  std::string task = "addition:digits=3";
  std::string recipe = "mxfp8";  // plan name or .toml
  int64_t sft_steps = 300;
  int64_t batch_size = 64;
  double lr = 2e-3;  // cosine schedule, min(30, sft_steps / 2) warmup steps, no weight decay
  int64_t eval_problems = 200;
  uint64_t init_seed = 0, seed = 0;
};

struct WarmStart {
  std::string model;    // dir/sft/final
  double accuracy = 0;  // held-out greedy accuracy at the end of SFT
};

// init (dir/init) + SFT (dir/sft) of a preset; on_step(step, loss) after each step.
WarmStart warm_start(const std::string& dir, const WarmStartConfig& cfg,
                     const std::function<void(int64_t step, double loss)>& on_step = {}, const Exec& exec = {});

}  // namespace mxrl
