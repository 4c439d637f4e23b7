// Helpers for the tests that run the mxrl binary (MXRL_BIN) as a user would.
#pragma once
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mxrl::testing_cli {

struct CmdResult {
  int rc;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `mxrl ARGS` with `input` on stdin, capturing stdout and stderr in files under dir.
inline CmdResult run_mxrl(const std::filesystem::path& dir, const std::string& args, const std::string& input = "") {
  const auto in = dir / "stdin.txt", out = dir / "stdout.txt", err = dir / "stderr.txt";
  std::ofstream(in, std::ios::binary) << input;
  const std::string cmd =
      std::string(MXRL_BIN) + " " + args + " <" + in.string() + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  return {WEXITSTATUS(status), slurp(out), slurp(err)};
}

}  // namespace mxrl::testing_cli
