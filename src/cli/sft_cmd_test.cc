// mxrl sft / demo / bench train / score --engine, run as a user would.
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
using testing_cli::slurp;

class SftCmd : public testing_cli::SmallModelTest {};

TEST_F(SftCmd, TrainsWritesMetricsAndCheckpointsAndResumesBitwise) {
  const std::string common = " --task addition:digits=2 --batch-size 8 --micro-batch-tokens 48 --lr 2e-3 --warmup 1"
                             " --schedule cosine --eval-every 2 --eval-problems 6 --threads 2";
  auto r = run_mxrl(dir_, "sft --model " + model() + common + " --steps 4 --save-every 2 --recipe mxfp8 --out " +
                              path("run1") + " --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("eval at step 2"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("samples"), std::string::npos) << r.out;
  const auto m = read_jsonl(path("m.jsonl"));
  int steps = 0, evals = 0;
  for (const auto& j : m) {
    ASSERT_TRUE(j.contains("step")) << j;
    if (j.contains("loss")) {
      ++steps;
      EXPECT_EQ(j["step"], steps);
      EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
      EXPECT_GT(j["loss"].get<double>(), 0);
      EXPECT_GE(j["micro_batches"].get<int>(), 2);
    } else {
      ++evals;
      EXPECT_GE(j["eval_accuracy"].get<double>(), 0.0);
      EXPECT_LE(j["eval_accuracy"].get<double>(), 1.0);
      EXPECT_EQ(j["eval_total"], 6);
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(evals, 2);  // at step 2 and at the end
  for (const char* d : {"run1/step-000002", "run1/step-000004", "run1/final"})
    EXPECT_TRUE(fs::exists(path(d) + "/trainer_state.json")) << d;

  // Resuming the step-2 state ends where the run ended, bit for bit.
  r = run_mxrl(dir_, "sft --resume " + path("run1/step-000002") + " --out " + path("run2"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("from step 2"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(path("run1/final/model.safetensors")), slurp(path("run2/final/model.safetensors")));
  EXPECT_EQ(slurp(path("run1/final/optimizer.safetensors")), slurp(path("run2/final/optimizer.safetensors")));

  // A resumed run keeps its settings.
  r = run_mxrl(dir_, "sft --resume " + path("run1/step-000002") + " --out " + path("run3") + " --steps 9");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--steps cannot be changed"), std::string::npos) << r.err;
  // The final state is also a model checkpoint the other commands load.
  std::ofstream(path("seq.jsonl")) << "{\"tokens\": [1, 2, 3, 4], \"prompt_len\": 1}\n";
  r = run_mxrl(dir_, "score --model " + path("run1/final") + " --in " + path("seq.jsonl") + " --out " + path("lp.jsonl"));
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(SftCmd, TrainsOnAJsonlDatasetAndRejectsABadOneNamingTheLine) {
  std::ofstream(path("data.jsonl")) << "{\"prompt\": \"ab=\", \"answer\": \"ba\"}\n{\"prompt\": \"abc=\", \"answer\": \"cba\"}\n"
                                       "{\"prompt\": \"xy=\", \"answer\": \"yx\"}\n{\"prompt\": \"xyz=\", \"answer\": \"zyx\"}\n";
  auto r = run_mxrl(dir_, "sft --model " + model() + " --data " + path("data.jsonl") +
                              " --steps 2 --batch-size 4 --eval-problems 2 --recipe bf16 --out " + path("out"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("jsonl:"), std::string::npos) << r.err;
  std::ofstream(path("bad.jsonl")) << "{\"prompt\": \"ab=\", \"answer\": \"ba\"}\n{\"prompt\": \"abc=\"}\n";
  r = run_mxrl(dir_, "sft --model " + model() + " --data " + path("bad.jsonl") + " --steps 2 --out " + path("out2"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("bad.jsonl:2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("out2/final")));
  r = run_mxrl(dir_, "sft --model " + model() + " --task nosuchtask --steps 2 --out " + path("out3"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("addition"), std::string::npos) << "lists the known tasks: " << r.err;
}

TEST_F(SftCmd, LearnerAndSamplerScoresAreTheSameBytes) {
  std::ofstream(path("seqs.jsonl")) << "{\"tokens\": [5, 9, 2, 40, 7, 7, 1], \"prompt_len\": 2}\n"
                                       "{\"tokens\": [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], \"prompt_len\": 1}\n"
                                       "{\"tokens\": [80, 1], \"prompt_len\": 1}\n";
  for (const char* plan : {"fp32", "bf16", "mxfp8"}) {
    const std::string base = "score --model " + model() + " --in " + path("seqs.jsonl") + " --plan " + plan;
    auto a = run_mxrl(dir_, base + " --out " + path("s.jsonl"));
    auto b = run_mxrl(dir_, base + " --engine learner --batch-tokens 8 --out " + path("l.jsonl"));
    ASSERT_EQ(a.rc, 0) << a.err;
    ASSERT_EQ(b.rc, 0) << b.err;
    EXPECT_EQ(slurp(path("s.jsonl")), slurp(path("l.jsonl"))) << plan;
    EXPECT_NE(b.err.find("with the learner"), std::string::npos);
  }
}

TEST_F(SftCmd, DemoRunsEndToEnd) {
  auto r = run_mxrl(dir_, "demo --out " + path("demo") + " --steps 3 --warmup 1 --eval-every 0 --eval-problems 4 --batch-size 4"
                          " --rl-steps 2 --prompts-per-step 2 --samples-per-prompt 2 --metrics " + path("m.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("held-out greedy accuracy:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after RL (2 steps, every sync passing all seven checks)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("demo/init/config.json")));
  EXPECT_TRUE(fs::exists(path("demo/sft/final/model.safetensors")));
  EXPECT_TRUE(fs::exists(path("demo/rl/final/model.safetensors")));
  int rl_steps = 0;
  for (const auto& j : read_jsonl(path("m.jsonl.rl.jsonl"))) rl_steps += j.contains("reward_mean");
  EXPECT_EQ(rl_steps, 2);
}

TEST_F(SftCmd, BenchTrainSweepFitsBothRecipes) {
  auto r = run_mxrl(dir_, "bench train --preset tiny-dense --tokens 256 --seq-len 64 --sweep --budgets 64 128 256 --reps 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["results"].size(), 6u);
  for (const auto& x : j["results"]) {
    EXPECT_GT(x["tokens_per_s"].get<double>(), 0) << x;
    EXPECT_GE(x["rest_s"].get<double>(), -1e-3) << "the split adds up to at most the step: " << x;
  }
  EXPECT_TRUE(j["fits"].contains("bf16"));
  EXPECT_TRUE(j["fits"].contains("mxfp8"));
  EXPECT_TRUE(j["crossover"].contains("mxfp8"));
  r = run_mxrl(dir_, "bench train --tokens 100 --seq-len 64");
  EXPECT_EQ(r.rc, 1);
}

}  // namespace
}  // namespace mxrl
