// GRPO on a verifiable task, colocated in one process: the sampler (an
// Engine) generates, the task's verifier rewards, the learner trains with the
// PPO-clip objective (train/grpo_math.h), and every new weight version reaches
// the sampler through the sync protocol (sync/sync.h), followed by the seven
// live checks.
//
// One step t (the sampler serving version t, which is the learner's weights
// after t steps):
//   1. prompts: Train problems t*P .. t*P+P-1 of the task's seed; G samples
//      each (request id = problem index, counter-based draws: the samples
//      depend on nothing but the seed, the problem and the weights);
//   2. rewards: 1 if task.verify(completion) else 0; group advantages;
//   3. the learner scores the samples (log-probs at the start of the step:
//      the "old" policy; exact KL against the sampler's recorded rows);
//      then K mini-batch updates (updates_per_batch), each with the PPO-clip
//      weights at the current parameters; sequences whose weights are all
//      zero are left out of the backward (they add nothing to the gradient;
//      a mini-batch with none left skips its optimizer update);
//   4. sync of version t+1 and the checks (--checks stop: a failing check
//      ends the run with the findings as the error).
//
// Faults (RlConfig::inject, faults/faults.h) are handed to the seams where
// they live as hooks (faults/hooks.h): the sync (learner, channel and loader
// faults) and the engine (caches, plan, kernels). sync-mid-generation also starts the next rollout
// before the sync (two engine steps), as an asynchronous trainer would; the
// faulty sync then swaps weights under those samples without draining.
//
// Resume: a run saved after step k continues, bit for bit, to the final
// weights of an uninterrupted run (the sampler is rebuilt at version k from
// the saved weights through the same sync).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "faults/faults.h"
#include "learner/learner.h"
#include "sampler/engine.h"
#include "sync/sync.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"
#include "train/grpo_math.h"
#include "train/sft.h"

namespace mxrl {

class RlRun;

struct RlConfig {
  std::string task = "addition";
  uint64_t seed = 0;
  int64_t steps = 100;
  int64_t prompts_per_step = 16;   // P
  int64_t samples_per_prompt = 8;  // G
  int64_t max_new_tokens = 0;      // 0: longest answer of the first eval problems + 8
  float temperature = 1.0f;
  AdvNorm adv_norm = AdvNorm::Std;
  double adv_eps = 1e-6;
  PolicyLossConfig loss;
  int64_t updates_per_batch = 1;  // K mini-batches per step, one optimizer update each
  std::string sampler_plan;       // "" = the learner's plan (name or .toml)
  SyncMode sync = SyncMode::Ship;
  CheckMode checks = CheckMode::Stop;
  int64_t agreement_every = 1;
  double agreement_max_kl = 0.05, agreement_max_abs_dlogp = 5.0;  // bound when the plans differ
  int64_t probe_prompts = 16;  // held-out prompts (with their answers) in the agreement probe
  int64_t eval_every = 0;      // steps between held-out greedy evaluations (0: start and end only)
  int64_t eval_problems = 200;
  int64_t save_every = 0;
  std::vector<std::string> inject;  // faults, NAME or NAME@STEP (faults/faults.h)
  // Off-policy bound: step t+1's rollout is generated under the weights of
  // step t while the learner trains step t (1), or on-policy (0). A sample
  // older than the bound is refused.
  int64_t off_policy = 0;
  int64_t sync_chunk_bytes = 1 << 20;  // the chunked channel's payload per chunk (not the math)
  // RL's learning rate is the one that works on the built-in tasks (the demo's
  // GRPO phase); 1e-3, the optimizer's default, wrecks an SFT warm start
  // within a few steps.
  LearnerConfig learner = [] {
    LearnerConfig l;
    l.optim.lr = 1e-4;
    return l;
  }();

  nlohmann::json to_json() const;
  static RlConfig from_json(const nlohmann::json& j);  // strict: every key, right types, in bounds
  void validate() const;
};
// Its fields (util/settings.h), the learner's included (flat, "optim" nested):
// the training state's "rl" settings, the options of `mxrl rl`.
const SettingsTable<RlConfig>& rl_fields();

// One step's figures (also the metrics line).
struct RlStepStats {
  int64_t step = 0;      // 1-based, after the update
  uint64_t version = 0;  // the version the samples were generated under
  double reward_mean = 0, reward_std = 0, accuracy = 0;
  double response_len_mean = 0;
  int64_t samples = 0, groups = 0, zero_adv_groups = 0, trained_sequences = 0, skipped_updates = 0;
  int64_t undecodable = 0;  // samples with ids outside the tokenizer (reward 0)
  nlohmann::json mismatch;  // MismatchStats of the rollout vs the learner's old log-probs
  double entropy = 0;       // mean per-token entropy of the learner's distribution
  PolicyLossResult loss;    // of the first mini-batch (ratio stats, clip fraction)
  double policy_loss = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0;         // trained tokens
  double staleness_mean = 0;  // learner version - sample version, over the samples
  int64_t staleness_max = 0;
  double generate_s = 0, score_s = 0, train_s = 0, sync_s = 0, seconds = 0;
  nlohmann::json sync_ranks;  // distributed: each sampler rank's report
  SyncReport sync;
  nlohmann::json to_json() const;
};

struct RlEvents {
  std::function<void(const RlStepStats&)> on_step;
  std::function<void(const EvalResult&)> on_eval;
  std::function<void(const std::string& dir)> on_save;
  std::function<void(const SyncReport&)> on_sync;  // every sync, including the first (version = resume step)
};

// A distributed runtime's half of a run (dist/distributed.h): the rollout, the
// optimizer step and the sync go to other processes. Null: colocated.
struct RlRemote {
  // Called once the run is set up, before its first sync: hand the other
  // processes what they need (settings, weights, the probe).
  std::function<void(RlRun& run)> init;
  // The samples of `reqs` (step `step`), generated on the sampler processes,
  // or collected from an earlier prefetch of that step.
  std::function<std::vector<GeneratedSample>(int64_t step, const std::vector<GenerationRequest>& reqs)> generate;
  // Starts step `step`'s rollout under the weights the samplers hold now.
  std::function<void(int64_t step, const std::vector<GenerationRequest>& reqs)> prefetch;
  // One optimizer step, data-parallel over the learner processes.
  std::function<StepResult(Learner& learner, const std::vector<Sequence>& batch, float temperature)> train;
  // Version `version` to every sampler process, and their checks, merged;
  // `ranks` gets each sampler rank's report.
  std::function<SyncReport(Learner& learner, const SyncSettings& s, const Probe& probe, uint64_t version,
                           nlohmann::json& ranks)>
      sync;
};

class RlRun {
 public:
  static RlRun start(const std::string& model_dir, const RlConfig& cfg, const Exec& exec = {});
  // With a task object instead of cfg.task (tests; such a run cannot be resumed).
  static RlRun start(const std::string& model_dir, const RlConfig& cfg, std::unique_ptr<Task> task,
                     const Exec& exec = {});
  static RlRun resume(const std::string& state_dir, const Exec& exec = {});
  // The learner rank 0 of a distributed run: the same run, with `remote`
  // doing the rollout, the optimizer step and the sync (no local engine).
  static RlRun start_remote(const std::string& model_dir, const RlConfig& cfg, std::shared_ptr<RlRemote> remote,
                            const Exec& exec = {});
  static RlRun resume_remote(const std::string& state_dir, std::shared_ptr<RlRemote> remote, const Exec& exec = {});
  // Runs the remaining steps; evaluates (greedy, through the sampler) before
  // the first step and at the end; saves out_dir/step-NNNNNN every save_every
  // steps and out_dir/final. Returns the evaluations, first to last.
  std::vector<EvalResult> run(const std::string& out_dir, const RlEvents& events = {});
  // One step (for tests); throws mxrl::Error on a failed check under --checks stop.
  RlStepStats step_once(const RlEvents& events = {});
  void save(const std::string& dir);  // (collects a rollout generated ahead, off-policy)

  const RlConfig& config() const { return cfg_; }
  int64_t step() const { return step_; }
  Learner& learner() { return *learner_; }
  Engine& engine() { return *engine_; }  // colocated only
  bool colocated() const { return engine_ != nullptr; }
  const PrecisionPlan& sampler_plan() const { return *sync_.sampler_plan; }
  const Probe& probe() const { return probe_; }
  const SyncSettings& sync_settings() const { return sync_; }
  const Task& task() const { return *task_; }
  const SyncReport& last_sync() const { return last_sync_; }
  EvalResult evaluate_now();

 private:
  RlRun() = default;
  void init(ParamTable params, const std::string& tokenizer_json, const std::string& tokenizer_config_json,
            const Exec& exec);
  static RlRun start_impl(const std::string& model_dir, const RlConfig& cfg, std::unique_ptr<Task> task,
                          std::shared_ptr<RlRemote> remote, const Exec& exec);
  static RlRun resume_impl(const std::string& state_dir, std::shared_ptr<RlRemote> remote, const Exec& exec);
  void sync_to_sampler(const RlEvents& ev, nlohmann::json* ranks = nullptr);
  // The P x G requests of step t, and their problems.
  std::vector<GenerationRequest> make_requests(int64_t t, std::vector<Problem>* problems = nullptr) const;
  // Submits the requests of step t to the local sampler.
  void submit_rollout(int64_t t);
  // Step t's samples: generated now, or prefetched (off-policy) under an older version.
  std::vector<GeneratedSample> rollout(int64_t t);
  void prefetch(int64_t t);

  RlConfig cfg_;
  std::unique_ptr<Task> task_;
  TaskSetup setup_;
  int64_t step_ = 0;
  std::unique_ptr<Learner> learner_;
  std::unique_ptr<Engine> engine_;
  SyncSettings sync_;
  Probe probe_;
  SyncReport last_sync_;
  FaultPlan faults_;
  int64_t presubmitted_ = -1;                  // sync-mid-generation: the step whose rollout already started
  std::vector<GeneratedSample> early_;         // ... and its samples that finished before the sync
  int64_t prefetched_step_ = -1;               // off-policy: the step whose rollout was generated early
  std::vector<GeneratedSample> prefetched_;    // ... its samples (colocated)
  std::vector<GeneratedSample> last_rollout_;  // the sampler's last rollout (the atomicity check's input)
  uint64_t last_rollout_version_ = 0;          // ... and the version it was meant for
  std::shared_ptr<RlRemote> remote_;
  Exec exec_;
};

}  // namespace mxrl
