// Helpers for the tests that run the mxrl binary (MXRL_BIN) as a user would.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/files.h"

namespace mxrl::test {

struct CmdResult {
  int rc;
  std::string out, err;
};

using test::slurp;

// Runs `mxrl ARGS` with `input` on stdin, capturing stdout and stderr in files under dir.
inline CmdResult run_mxrl(const std::filesystem::path& dir, const std::string& args, const std::string& input = "") {
  const auto in = dir / "stdin.txt", out = dir / "stdout.txt", err = dir / "stderr.txt";
  std::ofstream(in, std::ios::binary) << input;
  const std::string cmd =
      std::string(MXRL_BIN) + " " + args + " <" + in.string() + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), slurp(out), slurp(err)};
}

// One JSON value per line of a JSONL file.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

// A fresh directory per test (named after the test), holding a small random
// model made by `mxrl init` (hidden 64, 2 layers, tied embeddings) at model().
class SmallModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("mxrl_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "small.toml") << "hidden_size = 64\nnum_hidden_layers = 2\nnum_attention_heads = 4\n"
                                          "num_key_value_heads = 2\nhead_dim = 16\nintermediate_size = 128\n"
                                          "max_position_embeddings = 128\ntie_word_embeddings = true\n";
    const auto r = run_mxrl(dir_, "init --config " + path("small.toml") + " --out " + model());
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string model() const { return path("model"); }
  std::string path(const std::string& p) const { return (dir_ / p).string(); }
  std::filesystem::path dir_;
};

}  // namespace mxrl::test
