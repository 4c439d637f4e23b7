// Files for tests: a whole file's bytes, a directory's entries, and a fixture
// that gives each test a fresh temporary directory.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

namespace mxrl::test {

// The bytes of the file at `path` ("" if it cannot be read).
std::string slurp(const std::filesystem::path& path);

// The names of the entries of `dir`, sorted.
std::vector<std::string> entries(const std::filesystem::path& dir);

// A fresh directory per test, TMP/mxrl_<suite>_XXXXXX (mkdtemp), removed with
// everything in it after the test.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // dir_/name
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace mxrl::test
