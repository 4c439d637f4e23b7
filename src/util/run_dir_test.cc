#include "util/run_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {
using test::error_of;

namespace fs = std::filesystem;

RunDirOptions opts(bool overwrite, const std::string& resume_from, const std::string& command) {
  RunDirOptions o;
  o.overwrite = overwrite;
  o.resume_from = resume_from;
  o.command = command;
  return o;
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mxrl_run_dir_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string path(const std::string& p) const { return (root_ / p).string(); }
  fs::path root_;
};

TEST_F(RunDirTest, CreatesTheFolderAndNamesTheHolderInTheLockFile) {
  RunDir d = RunDir::open(path("a/b/out"), opts(false, "", "mxrl sft --out a/b/out"));
  EXPECT_TRUE(d.locked());
  std::ifstream f(path("a/b/out/run.lock"));
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line.rfind("pid " + std::to_string(::getpid()) + " on host ", 0), 0u) << line;
  EXPECT_NE(line.find(" UTC: mxrl sft --out a/b/out"), std::string::npos) << line;
  EXPECT_TRUE(d.notes().empty());
}

// A second writer (here another process) is refused with one line naming the holder.
TEST_F(RunDirTest, ASecondWriterIsRefusedNamingTheHolder) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RunDir d = RunDir::open(path("out"), opts(false, "", "the first run"));
    char c = 1;
    (void)!::write(to_parent[1], &c, 1);
    (void)!::read(to_child[0], &c, 1);  // hold the lock until told
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  const std::string err = error_of([&] { RunDir::open(path("out"), opts(false, "", "the second run")); });
  EXPECT_EQ(
      err.rfind(path("out") + ": another run is writing to this folder (pid " + std::to_string(child) + " on host ", 0),
      0u)
      << err;
  EXPECT_NE(err.find("UTC: the first run)"), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  ASSERT_EQ(::write(to_child[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // The holder gone, the folder is free again (the lock file stays).
  RunDir d = RunDir::open(path("out"), {});
  EXPECT_TRUE(d.locked());
  // Within one process too: each open is its own writer.
  EXPECT_NE(error_of([&] { RunDir::open(path("out"), {}); }).find("another run is writing"), std::string::npos);
}

TEST_F(RunDirTest, AnotherRunsCheckpointsAreRefusedUnlessOverwrittenOrResumedFromThere) {
  fs::create_directories(path("out/step-000002"));
  fs::create_directories(path("out/final"));
  std::ofstream(path("out/notes.txt")) << "mine";
  std::string err = error_of([&] { RunDir::open(path("out"), {}); });
  EXPECT_EQ(err, path("out") +
                     ": holds another run's checkpoints (final, step-000002); resume one of them with "
                     "--resume, choose another output folder, or pass --overwrite to replace them");
  // Resuming a state of this folder continues here, removing nothing.
  {
    RunDir d = RunDir::open(path("out"), opts(false, path("out/step-000002/"), ""));
    EXPECT_TRUE(d.notes().empty());
  }
  EXPECT_TRUE(fs::exists(path("out/final")));
  // A state from elsewhere is a new run's business.
  fs::create_directories(path("other/step-000001"));
  err = error_of([&] { RunDir::open(path("out"), opts(false, path("other/step-000001"), "")); });
  EXPECT_NE(err.find("holds another run's checkpoints"), std::string::npos) << err;
  // --overwrite removes them (and only them), and says so.
  RunDir d = RunDir::open(path("out"), opts(true, "", ""));
  ASSERT_EQ(d.notes().size(), 1u);
  EXPECT_EQ(d.notes()[0], path("out") + ": removed another run's checkpoints (--overwrite): final, step-000002");
  EXPECT_FALSE(fs::exists(path("out/final")));
  EXPECT_FALSE(fs::exists(path("out/step-000002")));
  EXPECT_TRUE(fs::exists(path("out/notes.txt")));
}

TEST_F(RunDirTest, LeftoversOfAKilledSaveAreRemovedAndNamed) {
  for (const char* d : {"out/step-000004.partial-a1B2c3", "out/final.partial-XyZ123", "out/final.old-abcdef",
                        "out/mine.partial-abcdef", "out/step-000004.partial-toolong"})
    fs::create_directories(path(d));
  std::ofstream(path("out/final.partial-XyZ123/model.safetensors")) << "half";
  RunDir d = RunDir::open(path("out"), {});
  ASSERT_EQ(d.notes().size(), 1u);
  EXPECT_EQ(d.notes()[0], path("out") +
                              ": removed 3 folders left by an interrupted save: final.old-abcdef, "
                              "final.partial-XyZ123, step-000004.partial-a1B2c3");
  EXPECT_FALSE(fs::exists(path("out/final.partial-XyZ123")));
  EXPECT_FALSE(fs::exists(path("out/step-000004.partial-a1B2c3")));
  EXPECT_TRUE(fs::exists(path("out/mine.partial-abcdef")));  // not a checkpoint's temporary
  EXPECT_TRUE(fs::exists(path("out/step-000004.partial-toolong")));
}

TEST_F(RunDirTest, MakeParentDirsCreatesTheFoldersOfAnOutputFile) {
  make_parent_dirs(path("x/y/m.jsonl"));
  EXPECT_TRUE(fs::is_directory(path("x/y")));
  make_parent_dirs("plain.jsonl");  // no parent part: nothing to do
  std::ofstream(path("file")) << "";
  const std::string err = error_of([&] { make_parent_dirs(path("file/m.jsonl")); });
  EXPECT_EQ(err.rfind(path("file/m.jsonl") + ": cannot create the folder " + path("file") + ": ", 0), 0u) << err;
}

}  // namespace
}  // namespace mxrl
