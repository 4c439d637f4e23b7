// mxrl rl, run as a user would: a short run with its metrics, --config with
// flags overriding it, one-line errors for bad settings, refusals.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/cli.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;
using testing_cli::read_jsonl;
using testing_cli::run_mxrl;

class RlCmd : public testing_cli::SmallModelTest {};

const std::string kSmall = " --task addition:digits=1 --prompts-per-step 3 --samples-per-prompt 2 --max-new-tokens 3"
                           " --eval-problems 4 --probe-prompts 2 --threads 2";

TEST_F(RlCmd, RunsWithEveryCheckPassingAndWritesMetricsPerStep) {
  const auto r = run_mxrl(dir_, "rl --model " + model() + " --out " + path("out") + " --steps 2 --metrics " +
                                    path("m.jsonl") + kSmall);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("held-out greedy accuracy"), std::string::npos) << r.err;
  const auto lines = read_jsonl(path("m.jsonl"));
  int steps = 0;
  for (const auto& j : lines) {
    if (!j.contains("reward_mean")) continue;
    ++steps;
    for (const char* k : {"coverage", "placement", "grid", "exceptions", "freshness", "atomicity", "agreement"})
      EXPECT_TRUE(j["sync"]["checks"][k]["passed"].get<bool>()) << k;
    EXPECT_TRUE(j["mismatch"]["bitwise_equal"].get<bool>());
    for (const char* k : {"generate_s", "score_s", "train_s", "sync_s", "entropy", "zero_adv_groups", "version"})
      EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(steps, 2);
  EXPECT_TRUE(fs::exists(path("out/final/model.safetensors")));
}

TEST_F(RlCmd, ConfigFileSetsOptionsAndFlagsOverrideIt) {
  std::ofstream(path("rl.toml")) << "steps = 3\nprompts_per_step = 2\nsamples_per_prompt = 2\nmax_new_tokens = 2\n"
                                    "eval_problems = 0\nprobe_prompts = 1\nsync = \"requantize\"\nsampler_plan = \"bf16\"\n"
                                    "lr = 0.001\nhybrid = false\n";
  const auto r = run_mxrl(dir_, "rl --model " + model() + " --out " + path("out") + " --config " + path("rl.toml") +
                                    " --steps 1 --task addition:digits=1 --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.err;
  int steps = 0;
  for (const auto& j : read_jsonl(path("m.jsonl"))) steps += j.contains("reward_mean");
  EXPECT_EQ(steps, 1);  // --steps 1 beat steps = 3
  EXPECT_NE(r.err.find("sampler bf16 fed by requantize"), std::string::npos) << r.err;
}

TEST_F(RlCmd, BadSettingsAreOneLineErrorsNamingTheKey) {
  const std::string base = "rl --model " + model() + " --out " + path("out") + " --config ";
  struct Case {
    std::string toml, expect;
  } cases[] = {{"bogus = 1\n", "unknown key 'bogus'"},
               {"steps = 2.5\n", "key 'steps': expected an integer"},
               {"sync = 3\n", "key 'sync': expected a string"},
               {"hybrid = \"yes\"\n", "key 'hybrid': expected true or false"},
               {"sync = \"teleport\"\n", "key 'sync'"},
               {"[learner]\nlr = 1\n", "key 'learner'"}};
  for (const Case& c : cases) {
    std::ofstream(path("bad.toml")) << c.toml;
    const auto r = run_mxrl(dir_, base + path("bad.toml"));
    EXPECT_EQ(r.rc, 1) << c.toml;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.toml << " -> " << r.err;
    EXPECT_NE(r.err.find("bad.toml"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(RlCmd, ImpossibleCombinationsAndChangedSettingsOnResumeAreRefused) {
  auto r = run_mxrl(dir_, "rl --model " + model() + " --out " + path("out") + " --recipe bf16 --sampler-plan mxfp8" + kSmall);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("requantize"), std::string::npos) << r.err;
  r = run_mxrl(dir_, "rl --model " + model() + " --out " + path("out") + " --steps 2 --save-every 1" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_mxrl(dir_, "rl --resume " + path("out/step-000001") + " --out " + path("out2") + " --lr 0.5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--lr cannot be changed"), std::string::npos) << r.err;
  r = run_mxrl(dir_, "rl --resume " + path("out/step-000001") + " --out " + path("out2"));
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(RlCmd, AnInjectedFaultIsCaughtAndBadInjectionsAreOneLineErrors) {
  const std::string base = "rl --model " + model() + " --out " + path("out") + " --steps 2" + kSmall;
  auto r = run_mxrl(dir_, base + " --inject stale-plan@1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("freshness: plan decode plan: built under version 0, live version 1"), std::string::npos) << r.err;
  struct Case {
    std::string inject, expect;
  } cases[] = {{"bogus", "unknown fault 'bogus'"},
               {"drop-tensor@0", "the step after '@' must be an integer >= 1"},
               {"drop-experts", "needs a MoE model"},
               {"requant-floor", "use --sync requantize"}};
  for (const Case& c : cases) {
    r = run_mxrl(dir_, base + " --inject " + c.inject);
    EXPECT_EQ(r.rc, 1) << c.inject;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.inject << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(RlCmd, FaultsListsEveryFaultAndWritesTheMatrix) {
  auto r = run_mxrl(dir_, "faults --list");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* f : {"drop-tensor", "expert-offset", "requant-floor", "router-bf16", "stale-plan", "partial-sync",
                        "foreign-kernel", "kv-scale-one"})
    EXPECT_NE(r.out.find(f), std::string::npos) << f;
  r = run_mxrl(dir_, "faults --out " + path("fm") + " --presets dense --dense-model " + model() +
                         " --only stale-plan,drop-experts --steps 3 --inject-step 2 --prompts-per-step 2"
                         " --samples-per-prompt 2 --task addition:digits=1 --threads 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json m = nlohmann::json::parse(testing_cli::slurp(path("fm/faults.json")));
  ASSERT_EQ(m["rows"].size(), 2u);
  const nlohmann::json& plan = m["rows"][0];
  EXPECT_EQ(plan["fault"], "drop-experts");
  EXPECT_FALSE(plan["applicable"].get<bool>());  // a dense model has no experts
  const nlohmann::json& stale = m["rows"][1];
  EXPECT_EQ(stale["fault"], "stale-plan");
  EXPECT_EQ(stale["fired"]["freshness"], 0);  // at the first sync after the injection
  EXPECT_TRUE(stale["first_opportunity"].get<bool>());
  // The course without checks, per step after the injection (step 3 of 3).
  EXPECT_EQ(stale["per_step"]["reward"]["fault"].size(), 1u);
  EXPECT_EQ(stale["per_step"]["kl_mean"]["clean"].size(), 1u);
  EXPECT_NE(testing_cli::slurp(path("fm/faults.md")).find("| dense | stale-plan | 5 freshness |"), std::string::npos);
}

}  // namespace
}  // namespace mxrl
