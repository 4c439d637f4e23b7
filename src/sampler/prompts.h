// From prompts to generation requests: the prompts file format of `mxrl
// generate`, the stop tokens every sampler gets by default, and the text of
// generated ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace mxrl {

struct Prompt {
  int64_t line = 0;  // 1-based line number in the prompts file
  std::vector<int32_t> tokens;
};

// A JSONL prompts file: {"prompt": "text"} (tokenized with `tk`, which may be
// null when the model has none; `model_dir` names it in the error) or
// {"tokens": [ids...]} per line, blank lines skipped, other keys ignored.
// Every prompt is validated against the model (vocabulary, length); errors
// name file:line and the field.
std::vector<Prompt> read_prompts(const std::string& path, const ModelConfig& cfg, const Tokenizer* tk,
                                 const std::string& model_dir);

// The one stop-token default of every sampler: `mxrl generate`, Python's
// Sampler.generate, and the rollouts and evaluations of RL and SFT. It is the
// model's end-of-sequence token, config.json's eos_token_id (the first where
// it lists several), when inside the vocabulary; none otherwise. (Chat tokens
// such as <|im_end|> are not stops unless asked for: RL rollouts end on EOS,
// and generate reproduces them.)
std::vector<int32_t> default_stop_tokens(const ModelConfig& cfg);

// The text of generated ids. Ids the tokenizer does not know (a model
// vocabulary padded past the tokenizer's) become U+FFFD.
std::string decode_text(const Tokenizer& tk, const std::vector<int32_t>& ids);

}  // namespace mxrl
