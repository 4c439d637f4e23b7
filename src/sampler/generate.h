// Batched generation of prompts from one prepared model: the one path of
// `mxrl generate` and of Python's Sampler.generate (stop tokens, KV budget,
// requests and the order of the results); the front ends parse and call.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "sampler/engine.h"
#include "util/exec.h"

namespace mxrl {

// The stop tokens of a generation: the model's default (default_stop_tokens,
// sampler/prompts.h: the same as RL and SFT rollouts) when `defaults`, then
// `extra`, each inside the vocabulary (else an error "WHAT ID: unknown token
// id, ..."), sorted and without repeats.
std::vector<int32_t> generation_stop_tokens(const ModelConfig& cfg, bool defaults, const std::vector<int64_t>& extra,
                                            const std::string& what);

struct GenerateOptions {
  int64_t n = 1;                // samples per prompt
  int64_t max_new_tokens = 64;  // most tokens per sample
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> stop_tokens;                      // generation_stop_tokens
  int64_t kv_budget = EngineOptions{}.kv_budget_tokens;  // KV cache positions reserved at once
  bool prefix_sharing = true;
  bool record_logits = false;  // keep each sample's raw FP32 logit rows (GeneratedSample::logits)
  // How the front end spells the two limits in its errors ("--max-new-tokens", "max_new_tokens").
  std::string max_new_tokens_name = "max_new_tokens", kv_budget_name = "kv_budget";
};

// After each engine step: samples finished so far, of `total`, and tokens generated so far.
struct GenerateProgress {
  int64_t samples = 0, total = 0, tokens = 0;
};

// n samples of each prompt under `model` (weight version 0: a checkpoint from
// disk). Prompt i is request id i, so its samples depend only on (seed, i, its
// tokens and the options), never on the other prompts, the KV budget, prefix
// sharing or the thread count. Returns them ordered by (prompt index, sample
// index). A bad option or prompt is an Error naming it (prompt i as
// prompt_label(i)), before any generation.
std::vector<GeneratedSample> generate(std::shared_ptr<const Model> model,
                                      const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
                                      const Exec& exec, const std::function<std::string(size_t)>& prompt_label,
                                      const std::function<void(const GenerateProgress&)>& on_step = {});

}  // namespace mxrl
