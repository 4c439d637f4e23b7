// mxrl tokenize: JSON lines on stdin -> JSON lines on stdout.
//   {"text": "..."}  ->  {"ids": [...]}
//   {"ids": [...]}   ->  {"text": "..."}   (--decode)
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool decode = false;
};

std::string process_line(const Tokenizer& tk, const std::string& line, bool decode) {
  using nlohmann::json;
  const json j = json_parse(line, "");
  if (!decode) {
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail("expected an object with \"text\" (a string)");
    const std::vector<int32_t> ids = tk.encode(j["text"].get_ref<const std::string&>());
    return json{{"ids", ids}}.dump();
  }
  if (!j.is_object() || !j.contains("ids") || !j["ids"].is_array())
    fail("expected an object with \"ids\" (an array of token ids)");
  const std::vector<int32_t> ids = json_token_ids(j["ids"], int64_t{1} << 31, "\"ids\"");
  return json{{"text", tk.decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

void run_tokenize(const TokenizeArgs& a) {
  const Tokenizer tk = Tokenizer::load(a.tokenizer);
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string out;
    try {
      out = process_line(tk, line, a.decode);
    } catch (const Error& e) {
      fail("stdin line {}: {}", n, e.what());
    }
    out += '\n';
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
      fail("cannot write to stdout");
  }
  if (std::cin.bad()) fail("cannot read stdin");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* c = app.add_subcommand("tokenize",
                               "Encode JSON lines {\"text\": ...} from stdin to {\"ids\": [...]} on stdout "
                               "(--decode: the reverse)");
  c->add_option("--tokenizer", a->tokenizer, "tokenizer.json, or a directory holding one")->required();
  c->add_flag("--decode", a->decode, "Read {\"ids\": [...]} lines and write {\"text\": ...}");
  c->callback([a] { run_tokenize(*a); });
}

}  // namespace mxrl
