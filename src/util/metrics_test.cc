#include "util/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;

// A full disk (/dev/full: every write fails with ENOSPC) is named with its reason.
TEST(MetricsSink, AFailedWriteSaysWhy) {
  MetricsSink m("/dev/full");
  try {
    m.write(nlohmann::json{{"step", 1}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "/dev/full: write failed: No space left on device");
  }
}

TEST(MetricsSink, CreatesTheParentFoldersAndSaysWhyItCannotOpen) {
  const fs::path dir = fs::temp_directory_path() / ("mxrl_metrics_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  {
    MetricsSink m((dir / "a/b/m.jsonl").string());
    m.write(nlohmann::json{{"step", 1}});
  }
  std::ifstream f(dir / "a/b/m.jsonl");
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, "{\"step\":1}");
  fs::create_directories(dir / "d.jsonl");  // a folder where the file should go
  try {
    MetricsSink m((dir / "d.jsonl").string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "d.jsonl").string() + ": cannot open for writing: Is a directory");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mxrl
