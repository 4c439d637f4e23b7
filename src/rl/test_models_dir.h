// Test helper: a small random model with the built-in character tokenizer,
// saved as a checkpoint directory (the form RL and SFT runs start from).
#pragma once
#include <filesystem>
#include <string>

#include "model/checkpoint.h"
#include "model/init.h"
#include "tasks/tasks.h"
#include "tokenizer/tokenizer.h"

namespace mxrl::rl::testing {

inline tok::Tokenizer char_tokenizer() { return tok::make_char_tokenizer(tasks::kTaskCharset, {"<|endoftext|>"}); }

// `c` with the tokenizer's end-of-text id, written to TMP/mxrl_<name> (replaced).
inline std::string make_model_dir(const std::string& name, ModelConfig c) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("mxrl_" + name)).string();
  std::filesystem::remove_all(dir);
  const auto tk = char_tokenizer();
  c.eos_token_ids = {*tk.token_id("<|endoftext|>")};
  c.validate("test");
  ParamTable p(c);
  init_params(p, 1);
  save_checkpoint(dir, c, p, st::DType::F32, {}, tk.to_json());
  return dir;
}

}  // namespace mxrl::rl::testing
