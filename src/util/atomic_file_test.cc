#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "testing/files.h"
#include "util/error.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;
using test::slurp;

class AtomicFileTest : public test::TempDirTest {
 protected:
  // Every entry of the test directory, by name.
  std::vector<std::string> entries() const { return test::entries(dir_); }
};

TEST_F(AtomicFileTest, CommittedFileHasTheContent) {
  AtomicFile f(file("out.bin"));
  EXPECT_EQ(f.path(), file("out.bin"));
  f.write("hello ", 6);
  f.write("world", 5);
  f.write(nullptr, 0);
  EXPECT_FALSE(fs::exists(file("out.bin")));  // nothing visible before commit
  f.commit();
  EXPECT_EQ(slurp(file("out.bin")), "hello world");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, WriteFileAtomicReplacesExistingFile) {
  write_file_atomic(file("a.txt"), "first version, longer");
  write_file_atomic(file("a.txt"), "second");
  EXPECT_EQ(slurp(file("a.txt")), "second");
  write_file_atomic(file("empty"), "");
  EXPECT_EQ(fs::file_size(file("empty")), 0u);
  EXPECT_EQ(entries(), (std::vector<std::string>{"a.txt", "empty"}));
}

TEST_F(AtomicFileTest, UncommittedWriteLeavesNothingBehind) {
  try {
    AtomicFile f(file("out.bin"));
    f.write("partial", 7);
    EXPECT_EQ(entries().size(), 1u);  // the temporary file exists while writing...
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(entries().empty());  // ...and is gone after the unwind
}

TEST_F(AtomicFileTest, UncommittedWriteKeepsExistingTarget) {
  write_file_atomic(file("out.bin"), "original");
  {
    AtomicFile f(file("out.bin"));
    f.write("replacement", 11);
  }
  EXPECT_EQ(slurp(file("out.bin")), "original");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, MissingDirectoryErrorNamesThePath) {
  std::string path = file("no/such/dir/out.bin");
  try {
    AtomicFile f(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path + ": cannot create temporary file: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  }
}

// A failing write (here EFBIG from a file size limit, standing in for
// ENOSPC) names the path, blocks commit() and leaves nothing behind.
TEST_F(AtomicFileTest, FailedWriteNamesPathAndLeavesNothing) {
  write_file_atomic(file("out.bin"), "original");
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  {
    AtomicFile f(file("out.bin"));
    try {
      f.write(std::string(100, 'x').data(), 100);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_THROW(f.commit(), Error);
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(msg, file("out.bin") + ": write failed: File too large");
  EXPECT_EQ(slurp(file("out.bin")), "original");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, ModeFollowsUmask) {
  mode_t old = ::umask(027);
  write_file_atomic(file("m"), "x");
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(file("m").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(AtomicFileTest, WriteAfterCommitAndDoubleCommitFail) {
  AtomicFile f(file("out.bin"));
  f.commit();
  EXPECT_THROW(f.write("x", 1), Error);
  EXPECT_THROW(f.commit(), Error);
  EXPECT_EQ(fs::file_size(file("out.bin")), 0u);
}

}  // namespace
}  // namespace mxrl
