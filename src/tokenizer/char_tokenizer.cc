// make_char_tokenizer: one token per ASCII character, as a byte-level BPE
// tokenizer.json with no merges.
#include <nlohmann/json.hpp>

#include <unordered_set>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl {

Tokenizer make_char_tokenizer(std::string_view charset, const std::vector<std::string>& special_tokens) {
  using detail::byte_char;
  using nlohmann::json;
  json vocab = json::object();
  std::unordered_set<std::string> chars;
  for (size_t i = 0; i < charset.size(); ++i) {
    const auto c = static_cast<uint8_t>(charset[i]);
    if (c >= 0x80) fail("char tokenizer: charset byte {} (0x{:02X}) is not ASCII", i, c);
    if (!chars.insert(byte_char(c)).second)
      fail("char tokenizer: charset repeats {}", detail::describe_char(charset, i));
    vocab[byte_char(c)] = static_cast<int32_t>(i);
  }
  json added = json::array();
  std::unordered_set<std::string> seen;
  int32_t next_id = static_cast<int32_t>(charset.size());
  for (const std::string& t : special_tokens) {
    if (t.empty()) fail("char tokenizer: empty special token");
    if (detail::find_invalid_utf8(t) != std::string_view::npos)
      fail("char tokenizer: special token is not valid UTF-8");
    if (!seen.insert(t).second) fail("char tokenizer: special token {} given twice", json(t).dump());
    if (chars.count(t)) fail("char tokenizer: special token {} is also a character of the charset", json(t).dump());
    added.push_back({{"id", next_id++},
                     {"content", t},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  const json doc = {{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", byte_level},
                    {"post_processor", nullptr},
                    {"decoder", byte_level},
                    {"model",
                     {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", false},
                      {"vocab", vocab},
                      {"merges", json::array()}}}};
  return Tokenizer::from_json(doc.dump(), "char tokenizer");
}

Tokenizer builtin_char_tokenizer() {
  return make_char_tokenizer(kBuiltinCharset, {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
}

}  // namespace mxrl
