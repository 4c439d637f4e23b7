#include "sampler/prompts.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <span>

#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

std::vector<Prompt> read_prompts(const std::string& path, const ModelConfig& cfg, const Tokenizer* tk,
                                 const std::string& model_dir) {
  using nlohmann::json;
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  constexpr const char* kShape = "expected {\"prompt\": \"text\"} or {\"tokens\": [ids...]}";
  std::vector<Prompt> prompts;
  std::string line;
  for (int64_t lineno = 1; std::getline(f, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Prompt p;
    p.line = lineno;
    const json j = json_parse(line, fmt::format("{}:{}", path, lineno));
    if (!j.is_object()) fail("{}:{}: {}", path, lineno, kShape);
    const bool has_prompt = j.contains("prompt"), has_tokens = j.contains("tokens");
    if (has_prompt == has_tokens) fail("{}:{}: {}", path, lineno, kShape);
    if (has_prompt) {
      if (!j["prompt"].is_string()) fail("{}:{}: \"prompt\" must be a string; {}", path, lineno, kShape);
      if (!tk)
        fail(
            "{}:{}: a {{\"prompt\": ...}} line needs a tokenizer, and {} has no tokenizer.json "
            "(give {{\"tokens\": [ids...]}} instead)",
            path, lineno, model_dir);
      try {
        p.tokens = tk->encode(j["prompt"].get_ref<const std::string&>());
      } catch (const Error& e) {
        fail("{}:{}: {}", path, lineno, e.what());
      }
    } else {
      p.tokens = json_token_ids(j["tokens"], cfg.vocab_size, fmt::format("{}:{}: \"tokens\"", path, lineno));
    }
    if (p.tokens.empty()) fail("{}:{}: empty prompt", path, lineno);
    for (int32_t t : p.tokens)  // a tokenizer larger than the model's vocabulary
      if (t < 0 || t >= cfg.vocab_size)
        fail("{}:{}: token id {} is outside the model's vocabulary [0, {})", path, lineno, t, cfg.vocab_size);
    const int64_t len = static_cast<int64_t>(p.tokens.size());
    if (len >= cfg.max_position_embeddings)
      fail("{}:{}: prompt of {} tokens is too long: max_position_embeddings {} leaves room for at most {}", path,
           lineno, len, cfg.max_position_embeddings, cfg.max_position_embeddings - 1);
    prompts.push_back(std::move(p));
  }
  if (f.bad()) fail("{}: read error", path);
  return prompts;
}

std::string decode_text(const Tokenizer& tk, const std::vector<int32_t>& ids) {
  try {
    return tk.decode(ids);
  } catch (const Error&) {
  }
  std::string text;
  std::vector<int32_t> run;
  auto flush = [&] {
    if (!run.empty()) text += tk.decode(run);
    run.clear();
  };
  for (int32_t t : ids) {
    bool known = true;
    try {
      tk.decode(std::span<const int32_t>(&t, 1));
    } catch (const Error&) {
      known = false;
    }
    if (known) {
      run.push_back(t);
    } else {
      flush();
      text += "\xEF\xBF\xBD";
    }
  }
  flush();
  return text;
}

std::vector<int32_t> default_stop_tokens(const ModelConfig& cfg) {
  const int64_t eos = cfg.eos_token_id();
  if (eos < 0 || eos >= cfg.vocab_size) return {};
  return {static_cast<int32_t>(eos)};
}

}  // namespace mxrl
