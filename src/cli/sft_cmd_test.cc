// mxrl sft / demo / bench train / score --engine, run as a user would.
#include <gtest/gtest.h>

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
using test::slurp;

class SftCmd : public test::SmallModelTest {};

TEST_F(SftCmd, TrainsWritesMetricsAndCheckpointsAndResumesBitwise) {
  const std::string common =
      " --task addition:digits=2 --batch-size 8 --micro-batch-tokens 48 --lr 2e-3 --warmup 1"
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
  r = run_mxrl(dir_,
               "score --model " + path("run1/final") + " --in " + path("seq.jsonl") + " --out " + path("lp.jsonl"));
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(SftCmd, TrainsOnAJsonlDatasetAndRejectsABadOneNamingTheLine) {
  std::ofstream(path("data.jsonl"))
      << "{\"prompt\": \"ab=\", \"answer\": \"ba\"}\n{\"prompt\": \"abc=\", \"answer\": \"cba\"}\n"
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

TEST_F(SftCmd, ConfigFileSetsTheSettingsAndFlagsOverrideIt) {
  std::ofstream(path("sft.toml")) << "task = \"addition:digits=1\"\nsteps = 3\nbatch_size = 3\neval_problems = 2\n"
                                     "lr = 0.002\nsamples = 0\nout = \""
                                  << path("out") << "\"\nmetrics = \"" << path("m.jsonl") << "\"\n";
  auto r = run_mxrl(dir_, "sft --model " + model() + " --config " + path("sft.toml") + " --steps 1 --threads 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  int steps = 0;
  for (const auto& j : read_jsonl(path("m.jsonl")))
    if (j.contains("loss")) {
      ++steps;
      EXPECT_EQ(j["lr"], 0.002);
    }
  EXPECT_EQ(steps, 1);  // --steps 1 beat steps = 3
  const auto st = nlohmann::json::parse(slurp(path("out/final/trainer_state.json")));
  EXPECT_EQ(st["meta"]["sft"]["batch_size"], 3);
  EXPECT_EQ(st["meta"]["sft"]["task"], "addition:digits=1");
  // Bad keys and values: one line naming the file and the key; --out is still required.
  std::ofstream(path("bad.toml")) << "batch_size = 0\n";
  r = run_mxrl(dir_, "sft --model " + model() + " --out " + path("o2") + " --config " + path("bad.toml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("bad.toml: key 'batch_size': --batch-size: must be >= 1, got 0"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_mxrl(dir_, "sft --model " + model());
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("give --out DIR"), std::string::npos) << r.err;
  // Resume refuses a setting given in the file as it does on the command line; other keys are fine.
  r = run_mxrl(dir_, "sft --resume " + path("out/final") + " --out " + path("o3") + " --config " + path("sft.toml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--task cannot be changed"), std::string::npos) << r.err;
  std::ofstream(path("resume.toml")) << "out = \"" << path("o4") << "\"\nsamples = 0\n";
  r = run_mxrl(dir_, "sft --resume " + path("out/final") + " --config " + path("resume.toml"));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::exists(path("o4/final/model.safetensors")));
}

TEST_F(SftCmd, DemoRunsEndToEnd) {
  // Settings from --config; the flag --rl-steps 2 beats rl_steps = 4.
  std::ofstream(path("demo.toml")) << "steps = 3\nwarmup = 1\neval_every = 0\neval_problems = 4\nbatch_size = 4\n"
                                      "rl_steps = 4\nprompts_per_step = 2\nsamples_per_prompt = 2\n";
  auto r = run_mxrl(dir_, "demo --out " + path("demo") + " --config " + path("demo.toml") + " --rl-steps 2 --metrics " +
                              path("m.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("held-out greedy accuracy:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after SFT (3 steps)"), std::string::npos) << r.out;  // steps = 3 from the file
  EXPECT_NE(r.out.find("after RL (2 steps, every sync passing all seven checks)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(path("demo/init/config.json")));
  EXPECT_TRUE(fs::exists(path("demo/sft/final/model.safetensors")));
  EXPECT_TRUE(fs::exists(path("demo/rl/final/model.safetensors")));
  int rl_steps = 0;
  for (const auto& j : read_jsonl(path("m.jsonl.rl.jsonl"))) rl_steps += j.contains("reward_mean");
  EXPECT_EQ(rl_steps, 2);
}

TEST_F(SftCmd, BenchTrainSweepFitsBothRecipes) {
  auto r = run_mxrl(
      dir_, "bench train --preset tiny-dense --tokens 256 --seq-len 64 --sweep --budgets 64 128 256 --reps 1 --json");
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

// A resume verifies what it resumes from: a flipped byte in the tensor data
// is refused naming the file. A dataset line longer than the model's
// positions allow is refused while reading, naming the file and line.
TEST_F(SftCmd, AResumeVerifiesItsStateAndALongDatasetLineIsRefused) {
  const std::string common = " --task addition:digits=1 --batch-size 4 --eval-problems 2 --recipe bf16 --threads 2";
  auto r = run_mxrl(dir_, "sft --model " + model() + common + " --steps 2 --save-every 1 --out " + path("run"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string weights = path("run/step-000001/model.safetensors");
  std::string b = slurp(weights);
  b[b.size() - 100] ^= 0x01;
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << b;
  r = run_mxrl(dir_, "sft --resume " + path("run/step-000001") + " --out " + path("run"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("mxrl: error: " + weights + ": XXH3 is ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  // The small model has 128 positions: lines up to 128 * 128 + 4096 bytes.
  std::ofstream(path("data.jsonl")) << "{\"prompt\": \"ab=\", \"answer\": \"ba\"}\n{\"prompt\": \""
                                    << std::string(1 << 20, 'x') << "\", \"answer\": \"y\"}\n";
  r = run_mxrl(dir_, "sft --model " + model() + " --data " + path("data.jsonl") + " --steps 1 --out " + path("d"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "mxrl: error: " + path("data.jsonl") +
                       ":2: line longer than 20480 bytes, more than the model's "
                       "positions allow\n");
}

// Every output a command names gets its parent folders.
TEST_F(SftCmd, OutputsGetTheirParentFolders) {
  std::ofstream(path("seq.jsonl")) << "{\"tokens\": [1, 2, 3, 4], \"prompt_len\": 1}\n";
  std::ofstream(path("prompts.jsonl")) << "{\"prompt\": \"1+2=\"}\n";
  {  // One F32 tensor of 1 x 32 ones, for quantize.
    const std::string header = R"({"x":{"dtype":"F32","shape":[1,32],"data_offsets":[0,128]}})";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header;
    for (int i = 0; i < 32; ++i) bytes += std::string("\x00\x00\x80\x3f", 4);
    std::ofstream(path("x.safetensors"), std::ios::binary) << bytes;
  }
  const std::string m = model();
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"sft --model " + m + " --task addition:digits=1 --steps 1 --batch-size 2 --eval-problems 0 --samples 0 --out " +
           path("o/sft") + " --metrics " + path("o/logs/sft.jsonl"),
       "o/logs/sft.jsonl"},
      {"score --model " + m + " --in " + path("seq.jsonl") + " --out " + path("o/score/lp.jsonl"), "o/score/lp.jsonl"},
      {"generate --model " + m + " --prompts " + path("prompts.jsonl") + " --max-new-tokens 2 --out " +
           path("o/gen/out.jsonl"),
       "o/gen/out.jsonl"},
      {"quantize " + path("x.safetensors") + " " + path("o/q/mx.safetensors") + " --elem e4m3 --scale-rule rceil",
       "o/q/mx.safetensors"},
      {"dequantize " + path("o/q/mx.safetensors") + " " + path("o/dq/f32.safetensors"), "o/dq/f32.safetensors"},
      {"sync export --sync ship --model " + m + " --out " + path("o/bundle/b.safetensors"), "o/bundle/b.safetensors"},
      {"sync dump --model " + m + " --out " + path("o/dump/d.safetensors") + " --previous-out " +
           path("o/prev/p.safetensors"),
       "o/prev/p.safetensors"},
      {"init --config " + path("small.toml") + " --out " + path("o/init/deep/model"), "o/init/deep/model/config.json"},
      {"export --format compressed-tensors --model " + m + " --out " + path("o/export/mx"), "o/export/mx/config.json"},
  };
  for (const auto& [args, file] : runs) {
    const auto r = run_mxrl(dir_, args);
    EXPECT_EQ(r.rc, 0) << args << "\n" << r.err;
    EXPECT_TRUE(fs::exists(path(file))) << args;
  }
}

}  // namespace
}  // namespace mxrl
