// GRPO end to end on small models: the reward rises, thread counts do not
// change a bit, every sampler plan x sync mode that can work runs clean with
// all seven checks, on-grid `ship` agrees bitwise (TIS weights exactly 1),
// refusals at start, and kill-and-resume ends on the same weights.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <set>

#include "model/checkpoint.h"
#include "model/init.h"
#include "testing/errors.h"
#include "testing/model_dir.h"
#include "testing/small_config.h"
#include "train/grpo.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;

using test::char_tokenizer;

std::string make_model_dir(const std::string& name, bool moe = false) {
  return test::make_model_dir("grpo_test_" + name, small_test_config(moe));
}

// A toy task a random model solves ~10% of the time: answer with a digit.
class DigitTask : public Task {
 public:
  std::string name() const override { return "test-digit"; }
  Problem generate(Split, uint64_t, uint64_t index) const override {
    return {std::string(1, static_cast<char>('a' + index % 26)) + "=", "7"};
  }
  bool verify(const Problem&, std::string_view c) const override { return !c.empty() && c[0] >= '0' && c[0] <= '9'; }
};

RlConfig small_config() {
  RlConfig c;
  c.steps = 2;
  c.prompts_per_step = 4;
  c.samples_per_prompt = 4;
  c.max_new_tokens = 3;
  c.probe_prompts = 2;
  c.eval_problems = 0;
  c.task = "addition:digits=1";
  c.learner.recipe.plan = "mxfp8";
  c.learner.optim.lr = 3e-3;
  c.learner.optim.weight_decay = 0;
  return c;
}

std::vector<float> weights(RlRun& r) {
  const auto s = r.learner().params().storage();
  return {s.begin(), s.end()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Grpo, RewardRisesOnAToyTaskAndAllChecksPassEveryStep) {
  const std::string dir = make_model_dir("reward");
  RlConfig cfg = small_config();
  cfg.steps = 14;
  cfg.prompts_per_step = 8;
  cfg.samples_per_prompt = 8;
  cfg.max_new_tokens = 2;
  cfg.agreement_every = 7;
  ThreadPool pool(2);
  RlRun run = RlRun::start(dir, cfg, std::make_unique<DigitTask>(), Exec{&pool});
  std::vector<double> reward;
  RlEvents ev;
  ev.on_step = [&](const RlStepStats& s) {
    reward.push_back(s.reward_mean);
    EXPECT_TRUE(s.sync.passed()) << s.step;
    EXPECT_EQ(s.sync.version, static_cast<uint64_t>(s.step));
    EXPECT_EQ(s.version + 1, static_cast<uint64_t>(s.step));
  };
  run.run("", ev);
  ASSERT_EQ(reward.size(), 14u);
  const double first = (reward[0] + reward[1] + reward[2]) / 3, last = (reward[11] + reward[12] + reward[13]) / 3;
  EXPECT_GT(last, first + 0.2) << "first " << first << " last " << last;
  EXPECT_EQ(run.engine().version(), 14u);
}

TEST(Grpo, OneAndThreeThreadsEndWithIdenticalWeights) {
  const std::string dir = make_model_dir("threads");
  RlConfig cfg = small_config();
  cfg.steps = 3;
  cfg.updates_per_batch = 2;
  std::vector<float> w[2];
  for (int i = 0; i < 2; ++i) {
    ThreadPool pool(i == 0 ? 1 : 3);
    RlRun run = RlRun::start(dir, cfg, Exec{&pool});
    run.run("");
    w[i] = weights(run);
  }
  EXPECT_TRUE(bitwise_equal(w[0], w[1]));
}

struct PlanCase {
  std::string recipe, sampler, sync;
  bool moe, bitwise;
};

TEST(Grpo, EveryWorkingSamplerPlanAndSyncModeRunsCleanWithAllSevenChecks) {
  const std::vector<PlanCase> cases = {
      {"mxfp8", "", "ship", false, true},
      {"mxfp8", "", "requantize", false, true},
      {"mxfp8", "mxfp8", "ship", true, true},
      {"mxfp8", "bf16", "ship", false, false},
      {"mxfp8", "bf16", "requantize", true, false},
      {"mxfp8", "mxfp8-half", "ship", false, false},
      {"mxfp8", "mxfp8-floor", "requantize", false, false},
      {"mxfp8", "fp8-block128", "requantize", false, false},
      {"mxfp8", "mxfp8+fp8kv", "ship", false, false},
      {"bf16", "", "ship", false, true},
      {"bf16", "mxfp8", "requantize", false, false},
  };
  ThreadPool pool(2);
  for (const PlanCase& pc : cases) {
    SCOPED_TRACE(pc.recipe + " -> " + (pc.sampler.empty() ? "(same)" : pc.sampler) + " by " + pc.sync +
                 (pc.moe ? " (moe)" : ""));
    const std::string dir = make_model_dir(pc.moe ? "plans_moe" : "plans", pc.moe);
    RlConfig cfg = small_config();
    cfg.learner.recipe.plan = pc.recipe;
    cfg.sampler_plan = pc.sampler;
    cfg.sync = parse_sync_mode(pc.sync);
    cfg.loss.correction = RolloutCorrection::TIS;
    std::vector<RlStepStats> steps;
    RlEvents ev;
    ev.on_step = [&](const RlStepStats& s) { steps.push_back(s); };
    try {
      RlRun run = RlRun::start(dir, cfg, Exec{&pool});
      run.run("", ev);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    ASSERT_EQ(steps.size(), 2u);
    for (const RlStepStats& s : steps) {
      EXPECT_TRUE(s.sync.passed());
      ASSERT_EQ(s.sync.checks.size(), 7u);
      const CheckResult& agree = s.sync.checks.back();
      ASSERT_EQ(agree.name, "agreement");
      EXPECT_EQ(agree.measured["bitwise_required"].get<bool>(), pc.bitwise);
      EXPECT_EQ(agree.measured["bitwise_equal"].get<bool>(), pc.bitwise);
      EXPECT_EQ(s.mismatch["bitwise_equal"].get<bool>(), pc.bitwise);
      if (pc.bitwise) {
        // On the learner's grid with shared kernels: w = exp(old - rollout) = 1 exactly.
        EXPECT_EQ(s.mismatch["is_max"].get<double>(), 1.0);
        EXPECT_EQ(s.mismatch["is_min"].get<double>(), 1.0);
        EXPECT_EQ(s.mismatch["kl_max"].get<double>(), 0.0);
      } else {
        EXPECT_GT(s.mismatch["kl_mean"].get<double>(), 0.0);
        EXPECT_GT(agree.measured["kl_mean"].get<double>(), 0.0);
      }
    }
  }
}

TEST(Grpo, ImpossibleCombinationsAreRefusedAtStart) {
  const std::string dir = make_model_dir("refuse");
  RlConfig cfg = small_config();
  cfg.learner.recipe.plan = "bf16";
  cfg.sampler_plan = "mxfp8";
  cfg.sync = SyncMode::Ship;
  try {
    RlRun::start(dir, cfg);
    FAIL() << "ship from a bf16 learner into an mxfp8 sampler was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("requantize"), std::string::npos) << e.what();
  }
  cfg = small_config();
  cfg.temperature = 0.0f;
  EXPECT_THROW(RlRun::start(dir, cfg), Error);
}

TEST(Grpo, KilledAtAStepAndResumedEndsWithTheSameWeightsBitForBit) {
  const std::string dir = make_model_dir("resume");
  const std::string out1 = dir + "_out1", out2 = dir + "_out2";
  fs::remove_all(out1), fs::remove_all(out2);
  RlConfig cfg = small_config();
  cfg.steps = 4;
  cfg.save_every = 2;
  cfg.updates_per_batch = 2;
  cfg.learner.optim.schedule = LrSchedule::Cosine;
  ThreadPool pool(2);
  std::vector<float> full;
  {
    RlRun run = RlRun::start(dir, cfg, Exec{&pool});
    run.run(out1);
    full = weights(run);
  }
  // "Killed" after step 2: continue from its checkpoint in a new process-like run.
  RlRun resumed = RlRun::resume(out1 + "/step-000002", Exec{&pool});
  EXPECT_EQ(resumed.step(), 2);
  EXPECT_EQ(resumed.engine().version(), 2u);
  resumed.run(out2);
  EXPECT_EQ(resumed.engine().version(), 4u);
  EXPECT_TRUE(bitwise_equal(full, weights(resumed)));
  const Checkpoint a = load_checkpoint(out1 + "/final"), b = load_checkpoint(out2 + "/final");
  EXPECT_TRUE(bitwise_equal({a.params.storage().begin(), a.params.storage().end()},
                            {b.params.storage().begin(), b.params.storage().end()}));
}

// Off-policy 1: step t+1's samples come from version t (staleness 1, in the
// metrics), every check still passes, the result differs from on-policy,
// and a run resumed from a state saved between the two (whose rollout of the
// next step was already generated, under the previous version) ends on the
// same weights bit for bit.
TEST(Grpo, OffPolicyOneStepBehindRecordsStalenessAndTheKlItCosts) {
  const std::string dir = make_model_dir("offpolicy");
  RlConfig cfg = small_config();
  cfg.steps = 4;
  cfg.prompts_per_step = 8;
  cfg.samples_per_prompt = 8;
  cfg.max_new_tokens = 2;
  cfg.off_policy = 1;
  std::vector<RlStepStats> stats;
  RlRun run = RlRun::start(dir, cfg, std::make_unique<DigitTask>());
  RlEvents ev;
  ev.on_step = [&](const RlStepStats& st) { stats.push_back(st); };
  run.run("", ev);
  ASSERT_EQ(stats.size(), 4u);
  for (size_t i = 0; i < stats.size(); ++i) {
    EXPECT_EQ(stats[i].staleness_max, i == 0 ? 0 : 1) << i;
    EXPECT_EQ(stats[i].version, i == 0 ? 0u : i - 1) << i;
    EXPECT_TRUE(stats[i].sync.passed()) << fmt::format("{}", fmt::join(stats[i].sync.findings(), " / "));
    if (i > 0) {
      EXPECT_GT(stats[i].mismatch.at("kl_mean").get<double>(), 0.0) << i;  // the policy moved under them
    }
  }
  EXPECT_EQ(stats[0].mismatch.at("kl_mean").get<double>(), 0.0);  // on the learner's grid, same version: bitwise
  cfg.off_policy = 0;
  RlRun on = RlRun::start(dir, cfg, std::make_unique<DigitTask>());
  on.run("");
  EXPECT_FALSE(bitwise_equal(weights(run), weights(on)));
}

// A run saved between the two (its next rollout already generated, under the
// previous version) and resumed ends on the same weights bit for bit.
TEST(Grpo, OffPolicyResumesBitForBit) {
  const std::string dir = make_model_dir("offpolicy_resume");
  const std::string out1 = dir + "_out1", out2 = dir + "_out2";
  fs::remove_all(out1), fs::remove_all(out2);
  RlConfig cfg = small_config();
  cfg.task = "addition:digits=1";  // a one-token answer from a random model is right ~1% of the time
  cfg.max_new_tokens = 1;
  cfg.steps = 4;
  cfg.prompts_per_step = 16;
  cfg.samples_per_prompt = 8;
  cfg.save_every = 1;
  cfg.off_policy = 1;
  std::vector<float> full;
  int64_t trained_after = 0;
  {
    RlRun run = RlRun::start(dir, cfg);
    RlEvents ev;
    ev.on_step = [&](const RlStepStats& st) { trained_after += st.step > 1 ? st.trained_sequences : 0; };
    run.run(out1, ev);
    full = weights(run);
  }
  ASSERT_GT(trained_after, 0) << "no update after the save: the test would show nothing";
  EXPECT_TRUE(fs::exists(out1 + "/step-000001/pending_rollout.bin"));
  EXPECT_FALSE(fs::exists(out1 + "/final/pending_rollout.bin"));  // nothing ahead after the last step
  RlRun resumed = RlRun::resume(out1 + "/step-000001");
  resumed.run(out2);
  EXPECT_TRUE(bitwise_equal(full, weights(resumed)));
}

TEST(Grpo, SettingsRoundTripAndAreReadStrictly) {
  RlConfig c = small_config();
  c.loss.agg = LossAgg::SeqMeanTokenMean;
  c.loss.correction = RolloutCorrection::MIS;
  c.sync = SyncMode::Requantize;
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(RlConfig::from_json(j).to_json(), j);
  nlohmann::json bad = j;
  bad["prompts_per_step"] = 2.5;
  EXPECT_THROW(RlConfig::from_json(bad), Error);
  bad = j;
  bad.erase("clip_high");
  EXPECT_THROW(RlConfig::from_json(bad), Error);
  bad = j;
  bad["loss_agg"] = "sum";
  EXPECT_THROW(RlConfig::from_json(bad), Error);
}

// The "rl" settings of a training state saved by mxrl before the settings
// tables (commit c7e12d7, `mxrl rl --steps 1 --task addition:digits=1
// --prompts-per-step 2 --samples-per-prompt 2 --max-new-tokens 3
// --eval-problems 2 --probe-prompts 1`): read as they were, written back byte
// for byte, so such states still resume.
const char* kSavedRlSettings =
    R"({"adv_eps": 1e-06, "adv_norm": "std", "agreement_every": 1, "agreement_max_abs_dlogp": 5.0, "agreement_max_kl": 0.05, "aux_loss_coef": 0.0, "checks": "stop", "clip_high": 0.28, "clip_low": 0.2, "correction_cap": 2.0, "eval_every": 0, "eval_problems": 2, "inject": [], "loss_agg": "token-mean", "max_new_tokens": 3, "micro_batch_tokens": 4096, "off_policy": 0, "optim": {"beta1": 0.9, "beta2": 0.95, "clip_norm": 1.0, "eps": 1e-08, "lr": 0.001, "min_lr_ratio": 0.1, "schedule": "constant", "total_steps": 0, "warmup_steps": 0, "weight_decay": 0.0}, "probe_prompts": 1, "prompts_per_step": 2, "recipe": {"floor": false, "hybrid": false, "plan": "mxfp8", "requant_every_microbatch": false}, "rollout_correction": "none", "sampler_plan": "", "samples_per_prompt": 2, "save_every": 0, "seed": 0, "steps": 1, "sync": "ship", "sync_chunk_bytes": 1048576, "task": "addition:digits=1", "temperature": 1.0, "updates_per_batch": 1})";

TEST(Grpo, SettingsOfSavedStatesReadAndWriteAsBefore) {
  const nlohmann::json saved = nlohmann::json::parse(kSavedRlSettings);
  const RlConfig c = RlConfig::from_json(saved);
  EXPECT_EQ(c.to_json().dump(), saved.dump());
  RlConfig d;  // the same settings, set by hand
  d.task = "addition:digits=1", d.steps = 1, d.prompts_per_step = 2, d.samples_per_prompt = 2, d.max_new_tokens = 3;
  d.eval_problems = 2, d.probe_prompts = 1, d.learner.optim.lr = 1e-3;
  EXPECT_EQ(d.to_json().dump(), saved.dump());
  // States saved before fault injection and the distributed runtime lack these keys.
  nlohmann::json older = saved;
  for (const char* k : {"inject", "off_policy", "sync_chunk_bytes"}) older.erase(k);
  EXPECT_EQ(RlConfig::from_json(older).to_json().dump(), saved.dump());
  // Every key is needed, none unknown; errors are one line naming the key.
  nlohmann::json bad = saved;
  bad["optim"]["lrr"] = 1;
  EXPECT_EQ(test::error_of([&] { RlConfig::from_json(bad); }), "RL settings: unknown key 'optim.lrr'");
  bad = saved;
  bad["recipe"].erase("floor");
  EXPECT_EQ(test::error_of([&] { RlConfig::from_json(bad); }), "RL settings: missing \"recipe.floor\"");
  bad = saved;
  bad["steps"] = 0;
  EXPECT_EQ(test::error_of([&] { RlConfig::from_json(bad); }), "RL settings: steps must be >= 1, got 0");
}

TEST(Grpo, EverySettingHasOneFlagAndTheBoundsValidateChecks) {
  std::set<std::string> flags;
  for (const auto& f : rl_fields())
    if (!f.flag.empty()) {
      EXPECT_TRUE(flags.insert(f.flag).second) << f.flag;
    }
  EXPECT_TRUE(flags.count("lr") && flags.count("clip") && flags.count("recipe") && flags.count("adv-norm"));
  EXPECT_FALSE(flags.count("eps") || flags.count("total-steps"));  // set by the run, not options
  RlConfig c;
  c.temperature = 0;
  EXPECT_EQ(test::error_of([&] { c.validate(); }), "RL settings: temperature must be > 0, got 0");
  c = RlConfig();
  c.learner.micro_batch_tokens = 0;
  EXPECT_EQ(test::error_of([&] { c.validate(); }), "RL settings: micro_batch_tokens must be >= 1, got 0");
}

// 1e-3, the optimizer's default, wrecks an SFT warm start within 3-10 GRPO
// steps on the built-in tasks; RL's default is the demo's 1e-4.
TEST(Grpo, DefaultLearningRateIsTheOneThatWorksOnTheBuiltInTasks) {
  EXPECT_EQ(RlConfig().learner.optim.lr, 1e-4);
  EXPECT_EQ(OptimConfig().lr, 1e-3);  // SFT keeps its own
}

}  // namespace
}  // namespace mxrl
