// The train-rollout KL during RL: GRPO runs from a fixed warm start with an
// on-grid sampler fed by `ship`, a BF16 sampler and another grid
// (mxfp8-floor by `requantize`), several seeds each; per step the exact KL,
// max |dlogp|, reward and the step-time split.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sync/sync.h"
#include "util/exec.h"

namespace mxrl {

struct RlKlSetup {
  std::string label;
  std::string sampler;  // "" = the learner's plan
  SyncMode sync = SyncMode::Ship;
};
std::vector<RlKlSetup> default_rl_kl_setups();

struct RlKlConfig {
  std::string dense_model, moe_model;  // "" skips a preset
  std::string recipe = "mxfp8";        // the learner's
  std::string task = "addition:digits=3";
  int64_t steps = 60, prompts_per_step = 16, samples_per_prompt = 8;
  double lr = 1e-4;
  std::vector<uint64_t> seeds = {1, 2, 3};
  std::vector<RlKlSetup> setups = default_rl_kl_setups();
};

// {"config", "runs": [{"preset", "config", "seed", "kl_mean": [...], "reward": [...],
//   "abs_dlogp_max": [...], "time": {generate_s, score_s, train_s, sync_s, checks_s, step_s}}]}
// (times: means over the steps after the first).
nlohmann::json run_rl_kl(const RlKlConfig& cfg, const std::function<void(const std::string&)>& progress,
                         const Exec& exec = {});

}  // namespace mxrl
