// SFT: sequence construction, evaluation through the sampler, learning a
// small task, and bitwise resume from a saved training state.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/checkpoint.h"
#include "model/init.h"
#include "testing/files.h"
#include "testing/model_dir.h"
#include "testing/small_config.h"
#include "train/sft.h"
#include "util/error.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;

using test::char_tokenizer;
using test::slurp;

// A small model with the character tokenizer, saved as a checkpoint directory.
std::string make_model_dir(const std::string& name, int layers = 2) {
  ModelConfig c = small_test_config(false);
  c.num_hidden_layers = layers;
  return test::make_model_dir("sft_test_" + name, c);
}

TEST(Sft, SequencesTargetTheAnswerAndTheEndToken) {
  const auto tk = char_tokenizer();
  const Sequence s = make_sft_sequence(tk, {"12+3=", "15"}, 86);
  const std::vector<int32_t> want_tokens = [&] {
    auto t = tk.encode("12+3=15");
    t.push_back(86);
    return t;
  }();
  EXPECT_EQ(s.tokens, want_tokens);
  EXPECT_EQ(s.target, (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  // A weak teacher's demonstration, when the problem has one, is what SFT imitates.
  const Sequence w = make_sft_sequence(tk, {"19+3=", "22", "12"}, 86);
  EXPECT_EQ(w.tokens, [&] {
    auto t = tk.encode("19+3=12");
    t.push_back(86);
    return t;
  }());
}

TEST(Sft, ResumingFromAMidRunCheckpointEndsBitwiseWhereTheRunEnded) {
  const std::string model = make_model_dir("resume");
  const std::string out1 = model + "_out1", out2 = model + "_out2";
  fs::remove_all(out1), fs::remove_all(out2);
  SftConfig cfg;
  cfg.task = "addition:digits=2";
  cfg.steps = 6;
  cfg.batch_size = 8;
  cfg.eval_every = 0;
  cfg.eval_problems = 4;
  cfg.save_every = 3;
  cfg.learner.recipe.plan = "mxfp8";
  cfg.learner.micro_batch_tokens = 40;  // several micro-batches per step
  cfg.learner.optim.lr = 1e-3;
  cfg.learner.optim.warmup_steps = 2;
  cfg.learner.optim.schedule = LrSchedule::Cosine;
  cfg.learner.optim.weight_decay = 0.1;
  SftRun::start(model, cfg).run(out1);
  ASSERT_TRUE(fs::exists(out1 + "/step-000003/trainer_state.json"));
  ASSERT_TRUE(fs::exists(out1 + "/step-000006/model.safetensors"));
  SftRun resumed = SftRun::resume(out1 + "/step-000003");
  EXPECT_EQ(resumed.step(), 3);
  EXPECT_EQ(resumed.config().steps, 6);
  EXPECT_EQ(resumed.config().learner.recipe.plan, "mxfp8");
  resumed.run(out2);
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    EXPECT_EQ(slurp(out1 + "/final/" + f), slurp(out2 + "/final/" + f)) << f;
  // ... and the weights did move.
  EXPECT_NE(slurp(out1 + "/step-000003/model.safetensors"), slurp(out1 + "/final/model.safetensors"));
  EXPECT_THROW(SftRun::resume(model), Error);  // a plain checkpoint is not a training state
}

TEST(Sft, LearnsOneDigitAdditionAndEvaluatesThroughTheSampler) {
  const std::string model = make_model_dir("learn");
  SftConfig cfg;
  cfg.task = "addition:digits=1";
  cfg.steps = 150;
  cfg.batch_size = 32;
  cfg.eval_every = 0;
  cfg.eval_problems = 10;  // the Eval split of 1-digit addition is small
  cfg.learner.recipe.plan = "bf16";
  cfg.learner.optim.lr = 3e-3;
  cfg.learner.optim.warmup_steps = 10;
  std::vector<double> losses;
  SftEvents ev;
  ev.on_step = [&](int64_t, const StepResult& r) { losses.push_back(r.loss); };
  SftRun run = SftRun::start(model, cfg);
  const EvalResult before = evaluate(run.learner().shared_model(), run.task(), run.tokenizer(), run.eos(), 0, 10, 4);
  const EvalResult after = run.run("", ev);
  ASSERT_EQ(losses.size(), 150u);
  EXPECT_LT(losses.back(), 0.5 * losses.front());
  EXPECT_EQ(after.total, 10);
  int correct = 0;
  for (const EvalSample& s : after.samples) {
    correct += s.correct;
    EXPECT_EQ(s.correct, s.completion == s.problem.answer) << s.problem.prompt << " -> " << s.completion;
  }
  EXPECT_EQ(correct, after.correct);
  EXPECT_GT(after.accuracy, before.accuracy);
}

// The "sft" settings of a training state saved by mxrl before the settings
// tables (commit c7e12d7, `mxrl sft --steps 1 --task addition:digits=1
// --batch-size 2 --eval-problems 2`): read, and written back byte for byte.
TEST(Sft, SettingsOfSavedStatesReadAndWriteAsBefore) {
  const nlohmann::json saved = nlohmann::json::parse(
      R"({"aux_loss_coef": 0.0, "batch_size": 2, "eval_every": 100, "eval_problems": 2, "max_new_tokens": 0, "micro_batch_tokens": 4096, "optim": {"beta1": 0.9, "beta2": 0.95, "clip_norm": 1.0, "eps": 1e-08, "lr": 0.001, "min_lr_ratio": 0.1, "schedule": "constant", "total_steps": 0, "warmup_steps": 0, "weight_decay": 0.0}, "recipe": {"floor": false, "hybrid": false, "plan": "mxfp8", "requant_every_microbatch": false}, "save_every": 0, "seed": 0, "steps": 1, "task": "addition:digits=1"})");
  EXPECT_EQ(SftConfig::from_json(saved).to_json().dump(), saved.dump());
  SftConfig c;
  c.task = "addition:digits=1", c.steps = 1, c.batch_size = 2, c.eval_problems = 2;
  EXPECT_EQ(c.to_json().dump(), saved.dump());
  // A changed round trip of every kind of field.
  c.seed = ~uint64_t{0}, c.learner.recipe.hybrid = true, c.learner.optim.schedule = LrSchedule::Cosine;
  c.learner.optim.total_steps = 5, c.learner.optim.lr = 0.1 + 0.2, c.learner.aux_loss_coef = 1.0 / 3;
  EXPECT_EQ(SftConfig::from_json(nlohmann::json::parse(c.to_json().dump())).to_json(), c.to_json());
  nlohmann::json bad = saved;
  bad["batch_size"] = "2";
  try {
    SftConfig::from_json(bad);
    ADD_FAILURE() << "accepted a string batch size";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "SFT settings: batch_size must be an integer, got \"2\" (string)");
  }
  c = SftConfig();
  c.eval_every = -1;
  try {
    c.validate();
    ADD_FAILURE() << "accepted eval_every -1";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "SFT settings: eval_every must be >= 0, got -1");
  }
}

}  // namespace
}  // namespace mxrl
