// Test helper: a small random model with the built-in character tokenizer,
// saved as a checkpoint directory (the form RL and SFT runs start from).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "model/checkpoint.h"
#include "model/init.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"

namespace mxrl::test {

inline Tokenizer char_tokenizer() { return make_char_tokenizer(kTaskCharset, {"<|endoftext|>"}); }

// `c` with the tokenizer's end-of-text id, written to
// TMP/mxrl_<name>_<test>_<pid> (replaced): ctest runs tests in parallel
// processes, so each test writes its own directory.
inline std::string make_model_dir(const std::string& name, ModelConfig c) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "_" + info->name() : "none";
  std::replace(test.begin(), test.end(), '/', '_');
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("mxrl_" + name + "_" + test + "_" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  const auto tk = char_tokenizer();
  c.eos_token_ids = {*tk.token_id("<|endoftext|>")};
  c.validate("test");
  ParamTable p(c);
  init_params(p, 1);
  save_checkpoint(dir, c, p, DType::F32, {}, tk.to_json());
  return dir;
}

}  // namespace mxrl::test
