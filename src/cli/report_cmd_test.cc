// mxrl report / experiment, run as a user would: the quick report runs every
// part and renders README.md and the plots; the JSON says what the matching
// experiment must show (on grid and shared kernels: bitwise; foreign kernels
// or another plan: not); `experiment` reruns one part and keeps the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "testing/cli.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;
using test::run_mxrl;

class ReportCmd : public test::SmallModelTest {};

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

const nlohmann::json& row(const nlohmann::json& m, const std::string& preset, const std::string& kernels,
                          const std::string& label) {
  for (const auto& r : m["rows"])
    if (r["preset"] == preset && r["kernels"] == kernels && r["label"] == label) return r;
  ADD_FAILURE() << "no row " << preset << " " << kernels << " " << label;
  static const nlohmann::json none;
  return none;
}

// --config on report and experiment (checked without running them): each key
// reaches its option, whose checks apply; bad keys are one line naming the
// file and the key.
TEST_F(ReportCmd, ConfigFileKeysReachTheOptions) {
  struct Case {
    std::string cmd, toml, expect;
  } cases[] = {{"report", "sft_steps = -1\n", "key 'sft_steps': --sft-steps: must be >= 0, got -1"},
               {"report", "parts = [\"matching\", \"bogus\"]\n", "key 'parts': --parts: bogus not in"},
               {"report", "quick = 1\n", "key 'quick': expected true or false"},
               {"report", "frobnicate = 1\n", "unknown key 'frobnicate'"},
               {"experiment matching", "threads = -2\n", "key 'threads': --threads: must be >= 0, got -2"}};
  for (const Case& c : cases) {
    std::ofstream(path("r.toml")) << c.toml;
    const auto r = run_mxrl(dir_, c.cmd + " --out " + path("r") + " --config " + path("r.toml"));
    EXPECT_EQ(r.rc, 1) << c.toml;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.toml << " -> " << r.err;
    EXPECT_NE(r.err.find("r.toml"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("r"))) << "nothing ran";
  }
}

TEST_F(ReportCmd, QuickReportRunsEveryPartAndRendersIt) {
  const std::string out = path("r");
  const auto r = run_mxrl(dir_, "report --quick --out " + out + " --threads 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* f : {"README.md", "matching.json", "rl_kl.json", "speed.json", "report.json", "faults/faults.json",
                        "faults/faults.md", "matching_kl.png", "rl_kl.png", "sweep.png", "step_split.png"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const nlohmann::json m = read_json(out + "/matching.json");
  for (const char* preset : {"dense", "moe"}) {
    const auto& on_grid = row(m, preset, "shared", "mxfp8");
    EXPECT_TRUE(on_grid["bitwise_equal"].get<bool>()) << preset;
    EXPECT_EQ(on_grid["kl_mean"].get<double>(), 0.0) << preset;
    EXPECT_FALSE(row(m, preset, "foreign", "mxfp8")["bitwise_equal"].get<bool>()) << preset;
    EXPECT_GT(row(m, preset, "shared", "bf16")["kl_mean"].get<double>(), 0.0) << preset;
  }
  EXPECT_FALSE(m["paper"].empty());
  // The README's numbers come from the JSON: the on-grid row is printed as bitwise.
  std::stringstream readme;
  readme << std::ifstream(out + "/README.md").rdbuf();
  EXPECT_NE(readme.str().find("0 (bitwise)"), std::string::npos);
  EXPECT_NE(readme.str().find("## 1. What matching buys"), std::string::npos);
  const nlohmann::json rep = read_json(out + "/report.json");
  for (const char* part : {"warm starts", "matching", "rl-kl", "speed", "faults"})
    EXPECT_EQ(rep["parts"][part]["mode"], "quick") << part;

  // One part again, on the same warm starts: the other parts' entries stay.
  const double matching_s = rep["parts"]["matching"]["seconds"].get<double>();
  const auto e = run_mxrl(dir_, "experiment rl-kl --quick --out " + out + " --no-render --dense-model " + out +
                                    "/warm/tiny-dense/sft/final --moe-model " + out + "/warm/tiny-moe/sft/final");
  ASSERT_EQ(e.rc, 0) << e.err;
  const nlohmann::json rep2 = read_json(out + "/report.json");
  EXPECT_EQ(rep2["parts"]["matching"]["seconds"].get<double>(), matching_s);
  EXPECT_TRUE(rep2["parts"].contains("rl-kl"));
}

TEST_F(ReportCmd, BadInputsAreOneLineErrors) {
  const std::string out = path("bad");
  fs::create_directories(out);
  std::ofstream(out + "/report.json") << "{not json";
  auto r =
      run_mxrl(dir_, "experiment rl-kl --quick --out " + out + " --dense-model " + model() + " --moe-model " + model());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(out + "/report.json: not a report.json"), std::string::npos) << r.err;
  r = run_mxrl(dir_, "experiment nonsense --out " + out);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("nonsense"), std::string::npos) << r.err;
  // The script rejects malformed experiment JSON with one line naming the file.
  const std::string dir2 = path("bad2");
  fs::create_directories(dir2);
  std::ofstream(dir2 + "/matching.json") << R"({"config": {}, "rows": [], "paper": []})";
  const std::string cmd = "/usr/bin/python3 " MXRL_SOURCE_DIR "/scripts/report.py " + dir2 + " 2>" + path("err.txt");
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::stringstream ss;
  ss << std::ifstream(path("err.txt")).rdbuf();
  const std::string err = ss.str();
  EXPECT_NE(err.find(dir2 + "/matching.json: "), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(fs::exists(dir2 + "/README.md"));
}

}  // namespace
}  // namespace mxrl
