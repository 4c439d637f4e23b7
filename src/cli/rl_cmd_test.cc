// mxrl rl, run as a user would: a short run with its metrics, --config with
// flags overriding it, one-line errors for bad settings, refusals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/cli.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;
using test::read_jsonl;
using test::run_mxrl;

class RlCmd : public test::SmallModelTest {};

const std::string kSmall =
    " --task addition:digits=1 --prompts-per-step 3 --samples-per-prompt 2 --max-new-tokens 3"
    " --eval-problems 4 --probe-prompts 2 --threads 2";

TEST_F(RlCmd, RunsWithEveryCheckPassingAndWritesMetricsPerStep) {
  const auto r = run_mxrl(
      dir_, "rl --model " + model() + " --out " + path("out") + " --steps 2 --metrics " + path("m.jsonl") + kSmall);
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
  std::ofstream(path("rl.toml"))
      << "steps = 3\nprompts_per_step = 2\nsamples_per_prompt = 2\nmax_new_tokens = 2\n"
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
  } cases[] = {
      {"bogus = 1\n", "unknown key 'bogus'"},          {"steps = 2.5\n", "key 'steps': expected an integer"},
      {"sync = 3\n", "key 'sync': expected a string"}, {"hybrid = \"yes\"\n", "key 'hybrid': expected true or false"},
      {"sync = \"teleport\"\n", "key 'sync'"},         {"[learner]\nlr = 1\n", "key 'learner'"}};
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
  auto r = run_mxrl(dir_,
                    "rl --model " + model() + " --out " + path("out") + " --recipe bf16 --sampler-plan mxfp8" + kSmall);
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

// `mxrl rl`'s default --lr was 1e-3, which wrecks an SFT warm start within
// 3-10 steps; it is the demo's GRPO rate, 1e-4, and the help says so.
TEST_F(RlCmd, DefaultLearningRateIsTheDemosAndTheHelpSaysSo) {
  auto option_line = [](const std::string& help, const std::string& flag) {
    const size_t at = help.find("  " + flag + " ");
    return at == std::string::npos ? std::string() : help.substr(at, help.find('\n', at) - at);
  };
  auto default_is = [](const std::string& line, const std::string& v) {  // "--lr FLOAT:POSITIVE=0.0001[ help]"
    const size_t at = line.find("=" + v);
    return at != std::string::npos && (at + 1 + v.size() == line.size() || line[at + 1 + v.size()] == ' ');
  };
  auto r = run_mxrl(dir_, "rl --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string line = option_line(r.out, "--lr");
  EXPECT_TRUE(default_is(line, "0.0001")) << line;
  EXPECT_NE(r.out.find("1e-4 is what `mxrl demo` uses"), std::string::npos) << r.out;
  r = run_mxrl(dir_, "demo --help");
  ASSERT_EQ(r.rc, 0) << r.err;
  line = option_line(r.out, "--rl-lr");
  EXPECT_TRUE(default_is(line, "0.0001")) << line;
}

// CLI11's own range checks printed "Value 0 not in range 0.000000 to
// 179769313486231570..." (384 characters); the bounds say what they are.
TEST_F(RlCmd, OutOfRangeOptionsSayTheBoundInOneShortLine) {
  struct Case {
    std::string args, expect;
  } cases[] = {{"rl --steps 0", "--steps: must be >= 1, got 0"},
               {"rl --lr 0", "--lr: must be > 0, got 0"},
               {"rl --off-policy 2", "--off-policy: must be in [0, 1], got 2"},
               {"rl --beta1 1", "--beta1: must be in [0, 1), got 1"},
               {"rl --threads -1", "--threads: must be >= 0, got -1"},
               {"sft --out x --batch-size 0", "--batch-size: must be >= 1, got 0"},
               {"demo --rl-steps 0", "--rl-steps: must be >= 1, got 0"},
               {"faults --steps 0", "--steps: must be >= 1, got 0"},
               {"report --sft-steps -1", "--sft-steps: must be >= 0, got -1"},
               {"init --out x --init-std 0", "--init-std: must be > 0, got 0"}};
  for (const Case& c : cases) {
    const auto r = run_mxrl(dir_, c.args);
    EXPECT_EQ(r.rc, 2) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(r.err.size(), 100u) << r.err;
  }
}

TEST_F(RlCmd, AnInjectedFaultIsCaughtAndBadInjectionsAreOneLineErrors) {
  const std::string base = "rl --model " + model() + " --out " + path("out") + " --steps 2" + kSmall;
  auto r = run_mxrl(dir_, base + " --inject stale-plan@1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("freshness: plan decode plan: built under version 0, live version 1"), std::string::npos)
      << r.err;
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
  // Settings from --config (a list option as an array); the flag --steps 3 beats steps = 5.
  std::ofstream(path("faults.toml")) << "only = [\"stale-plan\", \"drop-experts\"]\nsteps = 5\ninject_step = 2\n"
                                        "prompts_per_step = 2\nsamples_per_prompt = 2\npresets = \"dense\"\n";
  r = run_mxrl(dir_, "faults --out " + path("fm") + " --config " + path("faults.toml") + " --dense-model " + model() +
                         " --steps 3 --task addition:digits=1 --threads 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json m = nlohmann::json::parse(test::slurp(path("fm/faults.json")));
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
  EXPECT_NE(test::slurp(path("fm/faults.md")).find("| dense | stale-plan | 5 freshness |"), std::string::npos);
}

// The run folder is its own: made with the metrics file's folder inside it;
// a second writer is refused naming the holder; another run's checkpoints are
// refused unless --overwrite; a resume continues in its own folder, removing
// what a killed save left there and saying so.
TEST_F(RlCmd, ARunsFolderIsItsOwn) {
  const std::string d = path("runs/a"), run = "rl --model " + model() + " --out " + d;
  auto r = run_mxrl(dir_, run + " --metrics " + d + "/logs/m.jsonl --steps 2 --save-every 1" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.err;  // neither runs/a nor runs/a/logs existed
  const auto m = read_jsonl(d + "/logs/m.jsonl");
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](const nlohmann::json& j) { return j.contains("reward_mean"); }), 2);
  const std::string final_model = test::slurp(d + "/final/model.safetensors");

  r = run_mxrl(dir_, run + " --steps 2" + kSmall);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "mxrl: error: " + d +
                       ": holds another run's checkpoints (final, step-000001, step-000002); "
                       "resume one of them with --resume, choose another output folder, or pass --overwrite to "
                       "replace them\n");

  {  // Another writer holds the folder.
    const int fd = ::open((d + "/run.lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    const std::string holder = "pid 4242 on host elsewhere, since 2026-01-02 03:04:05 UTC: mxrl rl --out " + d + "\n";
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    ASSERT_EQ(::pwrite(fd, holder.data(), holder.size(), 0), static_cast<ssize_t>(holder.size()));
    r = run_mxrl(dir_, "rl --resume " + d + "/step-000001 --out " + d);
    ::close(fd);
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(r.err, "mxrl: error: " + d +
                         ": another run is writing to this folder (pid 4242 on host elsewhere, "
                         "since 2026-01-02 03:04:05 UTC: mxrl rl --out " +
                         d +
                         "); wait for it to end or choose another "
                         "output folder\n");
  }

  // A killed save's leftovers; the resume removes them, says so, and ends where the run ended.
  fs::create_directories(d + "/step-000002.partial-Ab12Cd");
  fs::create_directories(d + "/final.partial-xY34zW");
  r = run_mxrl(dir_, "rl --resume " + d + "/step-000001 --out " + d);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find(d + ": removed 2 folders left by an interrupted save: final.partial-xY34zW, "
                           "step-000002.partial-Ab12Cd\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d + "/final.partial-xY34zW"));
  EXPECT_EQ(test::slurp(d + "/final/model.safetensors"), final_model);
  // The lock file names the last holder: this process's child, the command it ran.
  EXPECT_NE(test::slurp(d + "/run.lock").find("rl --resume " + d + "/step-000001 --out " + d), std::string::npos);

  r = run_mxrl(dir_, run + " --steps 1 --overwrite" + kSmall);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find(d + ": removed another run's checkpoints (--overwrite): final, step-000001, step-000002\n"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(d + "/step-000002"));
}

}  // namespace
}  // namespace mxrl
