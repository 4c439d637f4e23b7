// Supervised fine-tuning on a verifiable task: teacher forcing on
// prompt + answer + end-of-text (loss on the answer and the end token), one
// optimizer step per batch of freshly generated training problems, and
// greedy exact-match evaluation on held-out problems through the sampler,
// which runs on the learner's own forward weights (the same Model object).
//
// Determinism: step s trains on Train problems s*batch .. (s+1)*batch-1 of
// the task's seed; there is no other randomness. A run saved after step k and
// resumed continues with the same data, settings and optimizer state, and
// ends with the weights an uninterrupted run ends with, bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "learner/learner.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"

namespace mxrl {

struct SftConfig {
  std::string task = "addition";  // task spec, or jsonl:PATH
  int64_t steps = 300;
  int64_t batch_size = 64;      // sequences per optimizer step
  uint64_t seed = 0;            // problem stream
  int64_t eval_every = 100;     // steps between evaluations (0: only at the end)
  int64_t eval_problems = 200;  // held-out problems per evaluation
  int64_t max_new_tokens = 0;   // generation limit at evaluation (0: longest answer + 8)
  int64_t save_every = 0;       // keep a training-state directory every K steps (0: none)
  LearnerConfig learner;
  nlohmann::json to_json() const;
  static SftConfig from_json(const nlohmann::json& j);  // strict: every key, right types, in bounds
  void validate() const;
};
// Its fields (util/settings.h), the learner's included (flat, "optim" nested):
// the training state's "sft" settings, the options of `mxrl sft`.
const SettingsTable<SftConfig>& sft_fields();

// What a run on a task takes from its checkpoint: the tokenizer (and its
// files, saved again with every training state), the end-of-text token, and
// the generation limit: max_new_tokens, or when 0 the longest answer among
// the first `count` Eval problems of `seed`, plus 8. Throws when the
// checkpoint has no tokenizer, no valid eos_token_id, or a tokenizer larger
// than the model's vocabulary.
struct TaskSetup {
  std::optional<Tokenizer> tk;
  std::string tokenizer_json, tokenizer_config_json;
  int32_t eos = -1;
  int64_t max_new = 0;
};
TaskSetup make_task_setup(const Task& task, const ModelConfig& cfg, const std::string& tokenizer_json,
                          const std::string& tokenizer_config_json, uint64_t seed, int64_t max_new_tokens,
                          int64_t count);

// prompt + answer + eos, with the answer's tokens and eos as targets.
Sequence make_sft_sequence(const Tokenizer& tk, const Problem& p, int32_t eos);

struct EvalSample {
  Problem problem;
  std::string completion;
  bool correct = false;
};
struct EvalResult {
  int64_t step = 0, correct = 0, total = 0;
  double accuracy = 0, seconds = 0;
  std::vector<EvalSample> samples;  // every problem, in order
  // The metrics line: step, eval_accuracy, eval_correct, eval_total, eval_seconds.
  nlohmann::json to_json() const;
};

// Greedy decoding of Eval problems 0..count-1 (seed) through the sampler
// engine on `model`; exact match by task.verify().
EvalResult evaluate(std::shared_ptr<const Model> model, const Task& task, const Tokenizer& tk, int32_t eos,
                    uint64_t seed, int64_t count, int64_t max_new_tokens, const Exec& exec = {});

struct SftEvents {
  std::function<void(int64_t step, const StepResult&)> on_step;  // after each optimizer step (1-based step)
  std::function<void(const EvalResult&)> on_eval;
  std::function<void(const std::string& dir)> on_save;
};

class SftRun {
 public:
  // A new run from a model checkpoint directory (config.json, weights, tokenizer.json).
  static SftRun start(const std::string& model_dir, const SftConfig& cfg, const Exec& exec = {});
  // Continues a run from a training-state directory it saved.
  static SftRun resume(const std::string& state_dir, const Exec& exec = {});

  // Runs the remaining steps; saves out_dir/step-NNNNNN every save_every
  // steps and the final state in out_dir/final (training-state directories,
  // each also a Hugging Face checkpoint). Returns the last evaluation.
  EvalResult run(const std::string& out_dir, const SftEvents& events = {});
  // The training state now, as saved (for tests).
  void save(const std::string& dir) const;

  const SftConfig& config() const { return cfg_; }
  int64_t step() const;
  Learner& learner() { return *learner_; }
  const Tokenizer& tokenizer() const { return *setup_.tk; }
  const Task& task() const { return *task_; }
  int32_t eos() const { return setup_.eos; }

 private:
  SftRun() = default;
  void init(ParamTable params, const std::string& tokenizer_json, const std::string& tokenizer_config_json,
            const Exec& exec);
  SftConfig cfg_;
  std::unique_ptr<Task> task_;
  TaskSetup setup_;
  std::unique_ptr<Learner> learner_;
  Exec exec_;
};

}  // namespace mxrl
