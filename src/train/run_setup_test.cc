// Run set-up: the task from --data, start or resume, the output folder held
// for the run (a second writer refused), another run's checkpoints refused
// unless overwritten, a resume continuing in its own folder.
#include "train/run_setup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "testing/errors.h"
#include "testing/model_dir.h"
#include "testing/small_config.h"
#include "util/error.h"

namespace mxrl {
namespace {
using test::error_of;
namespace fs = std::filesystem;

TEST(RunSetup, TheTaskComesFromDataAndANewRunNeedsAModel) {
  RunSpec s;
  EXPECT_EQ(task_of(s, "addition"), "addition");
  s.data = "d.jsonl";
  EXPECT_EQ(task_of(s, "addition"), "jsonl:d.jsonl");
  s.task_given = true;
  EXPECT_EQ(error_of([&] { task_of(s, "addition"); }), "give --task or --data, not both");
  EXPECT_EQ(error_of([&] { check_spec(RunSpec{}); }), "give --model DIR (or --resume STATE_DIR)");
}

TEST(RunSetup, TheOutputFolderIsHeldForTheRunAndHoldsOneRun) {
  ModelConfig c = small_test_config(false);
  c.num_hidden_layers = 1;
  const std::string model = test::make_model_dir("run_setup", c), out = model + "_out";
  fs::remove_all(out);
  SftConfig cfg;
  cfg.task = "addition:digits=1";
  cfg.steps = 1;
  cfg.batch_size = 2;
  cfg.eval_problems = 0;
  std::vector<std::string> notes;
  RunSpec spec;
  spec.model = model;
  spec.out = out;
  spec.on_note = [&](const std::string& n) { notes.push_back(n); };
  {
    SftSession s = open_sft(spec, cfg);
    EXPECT_TRUE(s.dir.locked());
    EXPECT_NE(error_of([&] { open_sft(spec, cfg); }).find(out + ": another run is writing to this folder (pid "),
              std::string::npos);
    s.run.run(out);
  }
  EXPECT_TRUE(fs::exists(out + "/final/trainer_state.json"));
  EXPECT_NE(error_of([&] { open_sft(spec, cfg); }).find(out + ": holds another run's checkpoints (final)"),
            std::string::npos);
  RunSpec resume = spec;
  resume.model.clear();
  resume.resume = out + "/final";
  EXPECT_EQ(open_sft(resume, cfg).run.step(), 1);  // continues in its own folder
  EXPECT_TRUE(notes.empty());
  spec.overwrite = true;
  EXPECT_EQ(open_sft(spec, cfg).run.step(), 0);
  EXPECT_EQ(notes, std::vector<std::string>{out + ": removed another run's checkpoints (--overwrite): final"});
  fs::remove_all(out);
  fs::remove_all(model);
}

}  // namespace
}  // namespace mxrl
