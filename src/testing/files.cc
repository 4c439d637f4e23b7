#include "testing/files.h"

#include <stdlib.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace mxrl::test {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void TempDirTest::SetUp() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string suite = info ? info->test_suite_name() : "test";
  std::replace(suite.begin(), suite.end(), '/', '_');
  std::string tmpl = (std::filesystem::temp_directory_path() / ("mxrl_" + suite + "_XXXXXX")).string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  dir_ = tmpl;
}

void TempDirTest::TearDown() {
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

}  // namespace mxrl::test
