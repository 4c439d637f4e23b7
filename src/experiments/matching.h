// What matching buys (docs/reference.md §1, §7): the exact train-rollout KL of a fixed
// model under one learner recipe (its forward log-probs are the reference)
// against samplers on other plans, other grids, with and without an FP8 KV
// cache, and with another engine's GEMM reduction order ("foreign kernels").
//
// One measurement: the sampler gets the learner's weights through the sync
// protocol (ship or requantize), generates G samples for each of P held-out
// prompts at temperature T, recording its full logit rows; the learner scores
// the same tokens. Per generated token: exact KL(p_sampler || p_learner) from
// both full distributions, k3 and |dlogp|. 95% confidence intervals come from
// a bootstrap over prompts (a prompt's samples resampled together), and the
// ratios of the paper's claims from a paired bootstrap (both configurations
// resampled with the same prompts).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sync/sync.h"
#include "util/exec.h"

namespace mxrl {

// One sampler configuration.
struct MatchSetup {
  std::string label;              // e.g. "mxfp8-floor (requantize)"
  std::string learner = "mxfp8";  // learner recipe (plan)
  std::string sampler = "mxfp8";  // sampler plan
  SyncMode sync = SyncMode::Ship;
};

// The configurations: bf16, mxfp8-half, mxfp8 (ship), mxfp8-floor and
// fp8-block128 (requantize) under an mxfp8 learner, and BF16 end to end, each
// with and without an FP8 KV cache.
std::vector<MatchSetup> default_match_setups();

struct MatchingConfig {
  std::string dense_model, moe_model;  // SFT-trained checkpoints ("" skips a preset)
  std::string task = "addition:digits=3";
  int64_t probe_prompts = 256, samples_per_prompt = 4;
  int64_t max_new_tokens = 0;  // 0: longest answer + 8
  float temperature = 1.0f;
  int64_t bootstrap = 1000;
  uint64_t seed = 1;        // held-out prompts (Eval split) and sampling
  int foreign_split_k = 4;  // the foreign kernels: K summed in this many partial chains
  std::vector<MatchSetup> setups = default_match_setups();
};

// Per prompt: the sums over its samples' generated tokens.
struct PromptSums {
  int64_t tokens = 0;
  double kl = 0, k3 = 0, abs_dlogp = 0, abs_dlogp_max = 0;
  int64_t unequal = 0;  // tokens whose log-probs differ at all
};

// Adds one sample's T generated tokens to p: rows [T, V] of the sampler and
// the learner at each generated token (logits, or log-probs: either is
// softmaxed at `temperature`), tokens [T] the sampled ones. scratch: [V].
void add_sample(PromptSums& p, const float* sampler_rows, const float* learner_rows, const int32_t* tokens, int64_t T,
                int64_t V, float temperature, std::vector<float>& scratch);

// The per-prompt sums of one configuration on one model; `exec` runs the
// learner, the sampler runs it too (with EngineOptions::forward.gemm_split_k = split_k when > 1).
std::vector<PromptSums> measure_matching(const std::string& model_dir, const MatchSetup& s, const MatchingConfig& cfg,
                                         int split_k, const Exec& exec = {});

// Bootstrap percentiles (2.5, 97.5) of sum(num) / sum(tokens) over prompts.
struct Interval {
  double mean = 0, lo = 0, hi = 0;
};
Interval bootstrap_mean(const std::vector<PromptSums>& p, double PromptSums::*field, int64_t reps, uint64_t seed);
// Of (sum a.kl / sum a.tokens) / (sum b.kl / sum b.tokens), a and b over the same prompts;
// NaN bounds where the denominator is 0.
Interval bootstrap_ratio(const std::vector<PromptSums>& a, const std::vector<PromptSums>& b, int64_t reps,
                         uint64_t seed);

// Every setup x {shared, foreign} kernels on each model, plus the paper's
// three claims: {"config", "presets", "rows", "paper"}.
nlohmann::json run_matching(const MatchingConfig& cfg, const std::function<void(const std::string&)>& progress,
                            const Exec& exec = {});

}  // namespace mxrl
