// tokenizer.json features against ids from Hugging Face `tokenizers`
// (0.23), and malformed files: each error names the file and the problem.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "testing/errors.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl {
namespace {

using nlohmann::json;

// ---- features ---------------------------------------------------------------
// Each config is a fragment over a base tokenizer: a vocab of the 256 byte
// tokens (id = byte) followed by one token per merge of kMerges; the fragment
// replaces top-level fields, adds model fields, and may drop byte tokens
// ("drop_bytes", renumbering the rest) or append tokens ("extra_vocab").
// Added tokens get the id `tokenizers` would give them. The expected ids were
// produced by `tokenizers` from the same JSON.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"},   {"he", "ll"},   {"hell", "o"}, {" ", "w"}, {"o", "r"},
    {"l", "d"}, {" w", "or"}, {" wor", "ld"}, {"a", "a"},    {"1", "2"}, {" ", " "}};

json build(const std::string& fragment) {
  json f = json::parse(fragment);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(detail::byte_char(static_cast<uint8_t>(b)));
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& [a, b] : kMerges) {
    merges.emplace_back(detail::to_byte_level(a), detail::to_byte_level(b));
    tokens.push_back(merges.back().first + merges.back().second);
  }
  if (f.contains("drop_bytes")) {
    std::vector<std::string> keep;
    for (const std::string& t : tokens) {
      bool drop = false;
      for (int b : f["drop_bytes"]) drop |= t.find(detail::byte_char(static_cast<uint8_t>(b))) != std::string::npos;
      if (!drop) keep.push_back(t);
    }
    tokens = keep;
    f.erase("drop_bytes");
  }
  for (const auto& t : f.value("extra_vocab", json::array())) tokens.push_back(t.get<std::string>());
  f.erase("extra_vocab");
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  json merge_list = json::array();
  for (const auto& [a, b] : merges)
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merge_list.push_back({a, b});
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json t = {{"version", "1.0"},      {"added_tokens", json::array()},
            {"normalizer", nullptr}, {"pre_tokenizer", byte_level},
            {"decoder", byte_level}, {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}}};
  for (auto& [k, v] : f.items())
    if (k != "model") t[k] = v;
  if (f.contains("model"))
    for (auto& [k, v] : f["model"].items()) t["model"][k] = v;
  int64_t next = static_cast<int64_t>(tokens.size());
  for (json& a : t["added_tokens"]) {
    const std::string c = a["content"];
    if (!a.contains("id")) a["id"] = vocab.contains(c) ? vocab[c].get<int64_t>() : next;
    if (!vocab.contains(c)) ++next;
    for (const char* k : {"single_word", "lstrip", "rstrip", "normalized", "special"})
      if (!a.contains(k)) a[k] = false;
  }
  return t;
}

struct Case {
  std::string config, text;
  std::vector<int32_t> ids;
};

// Generated with `tokenizers` 0.23.3 (encode(text, add_special_tokens=False)).
// clang-format off
const std::map<std::string, std::string> kConfigs = {
    {"qwenlike", R"json({"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}, "added_tokens": [{"content": "<|end|>", "special": true}, {"content": "<think>"}]})json"},
    {"gpt2", R"json({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}})json"},
    {"split_Removed_plain", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Removed", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_Removed_inverted", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Removed", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_Isolated_plain", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_Isolated_inverted", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Isolated", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_MergedWithPrevious_plain", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "MergedWithPrevious", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_MergedWithPrevious_inverted", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "MergedWithPrevious", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_MergedWithNext_plain", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "MergedWithNext", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_MergedWithNext_inverted", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "MergedWithNext", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_Contiguous_plain", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Contiguous", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_Contiguous_inverted", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "l+|\\d"}, "behavior": "Contiguous", "invert": true}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_string", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": "l.l"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": false}]}})json"},
    {"split_empty_matches", R"json({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "x*"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]}})json"},
    {"added_flags", R"json({"added_tokens": [{"content": "ab", "single_word": true}, {"content": "<L>", "lstrip": true}, {"content": "<R>", "rstrip": true}, {"content": "<LR>", "lstrip": true, "rstrip": true}]})json"},
    {"normalized_added", R"json({"normalizer": {"type": "NFKC"}, "added_tokens": [{"content": "\ufb01", "normalized": true}, {"content": "\uff21", "normalized": false}]})json"},
    {"longest_added", R"json({"added_tokens": [{"content": "<a>"}, {"content": "<a><b>"}, {"content": "<b>"}]})json"},
    {"unk", R"json({"drop_bytes": [120, 121], "extra_vocab": ["<unk>"], "model": {"unk_token": "<unk>"}})json"},
    {"fuse_unk", R"json({"drop_bytes": [120, 121], "extra_vocab": ["<unk>"], "model": {"unk_token": "<unk>", "fuse_unk": true}})json"},
    {"byte_fallback", R"json({"drop_bytes": [194, 195], "extra_vocab": ["<unk>", "<0xC3>", "<0x83>", "<0xC2>"], "model": {"unk_token": "<unk>", "byte_fallback": true}})json"},
    {"ignore_merges", R"json({"extra_vocab": ["helloworld"], "model": {"ignore_merges": true}})json"},
};
const std::vector<Case> kCases = {
    {"qwenlike", "hello world", {259, 264}},
    {"qwenlike", "hello  world", {259, 32, 264}},
    {"qwenlike", "Hello world!", {72, 101, 257, 111, 264, 33}},
    {"qwenlike", "aaaaa", {265, 265, 97}},
    {"qwenlike", "12123", {49, 50, 49, 50, 51}},
    {"qwenlike", "he<|end|>llo", {256, 268, 257, 111}},
    {"qwenlike", "<|end|><think>x", {268, 269, 120}},
    {"qwenlike", "e\xCC""\x81"" hello\x0A""\x0A"" world  ", {195, 169, 32, 259, 10, 10, 264, 267}},
    {"qwenlike", "I'M here", {73, 39, 77, 32, 256, 114, 101}},
    {"qwenlike", "x<|end|", {120, 60, 124, 101, 110, 100, 124}},
    {"qwenlike", "", {}},
    {"gpt2", "hello world", {32, 259, 264}},
    {"gpt2", "world", {264}},
    {"gpt2", "  world", {32, 264}},
    {"gpt2", "hello123 world", {32, 259, 266, 51, 264}},
    {"split_Removed_plain", "hello world", {256, 111, 263, 100}},
    {"split_Removed_plain", "ll12hell", {256}},
    {"split_Removed_plain", "ld", {100}},
    {"split_Removed_inverted", "hello world", {257, 108}},
    {"split_Removed_inverted", "ll12hell", {257, 49, 50, 257}},
    {"split_Removed_inverted", "ld", {108}},
    {"split_Isolated_plain", "hello world", {256, 257, 111, 263, 108, 100}},
    {"split_Isolated_plain", "ll12hell", {257, 49, 50, 256, 257}},
    {"split_Isolated_plain", "ld", {108, 100}},
    {"split_Isolated_inverted", "hello world", {256, 257, 111, 263, 108, 100}},
    {"split_Isolated_inverted", "ll12hell", {257, 49, 50, 256, 257}},
    {"split_Isolated_inverted", "ld", {108, 100}},
    {"split_MergedWithPrevious_plain", "hello world", {258, 111, 263, 108, 100}},
    {"split_MergedWithPrevious_plain", "ll12hell", {257, 49, 50, 258}},
    {"split_MergedWithPrevious_plain", "ld", {108, 100}},
    {"split_MergedWithPrevious_inverted", "hello world", {256, 257, 111, 263, 262}},
    {"split_MergedWithPrevious_inverted", "ll12hell", {257, 49, 50, 256, 257}},
    {"split_MergedWithPrevious_inverted", "ld", {262}},
    {"split_MergedWithNext_plain", "hello world", {256, 257, 111, 263, 262}},
    {"split_MergedWithNext_plain", "ll12hell", {257, 49, 50, 256, 257}},
    {"split_MergedWithNext_plain", "ld", {262}},
    {"split_MergedWithNext_inverted", "hello world", {258, 111, 263, 108, 100}},
    {"split_MergedWithNext_inverted", "ll12hell", {257, 49, 50, 258}},
    {"split_MergedWithNext_inverted", "ld", {108, 100}},
    {"split_Contiguous_plain", "hello world", {256, 257, 111, 263, 108, 100}},
    {"split_Contiguous_plain", "ll12hell", {257, 266, 256, 257}},
    {"split_Contiguous_plain", "ld", {108, 100}},
    {"split_Contiguous_inverted", "hello world", {256, 257, 111, 263, 108, 100}},
    {"split_Contiguous_inverted", "ll12hell", {257, 266, 256, 257}},
    {"split_Contiguous_inverted", "ld", {108, 100}},
    {"split_string", "hel.llo", {32, 256, 32, 108, 46, 108, 32, 108, 111}},
    {"split_string", "hello", {32, 259}},
    {"split_empty_matches", "hello", {104, 101, 108, 108, 111}},
    {"split_empty_matches", "hexxllo", {104, 101, 120, 120, 108, 108, 111}},
    {"added_flags", "ab abc cab ab_ a\xCC""\x81""ab \xC3""\xA9"" ab 1ab ab", {268, 32, 97, 98, 99, 32, 99, 97, 98, 32, 97, 98, 95, 32, 97, 204, 129, 97, 98, 32, 195, 169, 32, 268, 32, 49, 97, 98, 32, 268}},
    {"added_flags", "ab\xE2""\x80""\x8D""ab", {97, 98, 226, 128, 141, 97, 98}},
    {"added_flags", "x  <L>  y", {120, 269, 267, 121}},
    {"added_flags", "x  <R>  y", {120, 267, 270, 121}},
    {"added_flags", "x  <LR>  y", {120, 271, 121}},
    {"added_flags", "<R> <L>", {270, 269}},
    {"added_flags", "\xE3""\x80""\x80""<LR>\xC2""\xA0""z", {271, 122}},
    {"normalized_added", "\xEF""\xAC""\x81""fi", {268, 268}},
    {"normalized_added", "\xEF""\xBC""\xA1""A", {269, 65}},
    {"normalized_added", "x\xEF""\xAC""\x81""\xEF""\xBC""\xA1""", {120, 268, 269}},
    {"longest_added", "<a><b><a>", {269, 268}},
    {"longest_added", "<a><a><b>", {268, 269}},
    {"unk", "hexxo", {254, 266, 266, 111}},
    {"unk", "yx hello", {266, 266, 32, 257}},
    {"fuse_unk", "hexxo", {254, 266, 111}},
    {"fuse_unk", "yx hello x", {266, 32, 257, 32, 266}},
    {"byte_fallback", "\xC3""\xA9""!", {267, 268, 169, 33}},
    {"byte_fallback", "h\xC3""\xA9""", {104, 267, 268, 169}},
    {"byte_fallback", "\xC2""\xA9""x", {266, 169, 120}},
    {"byte_fallback", "\xC3""\xA9""\xC2""\xA9""", {267, 268, 169, 266, 169}},
    {"ignore_merges", "helloworld", {268}},
    {"ignore_merges", "hello", {259}},
};
// clang-format on

TEST(TokenizerJson, MatchesHuggingFaceOnEachFeature) {
  std::map<std::string, Tokenizer> tokenizers;
  for (const auto& [name, fragment] : kConfigs) {
    const std::string text = build(fragment).dump();
    tokenizers.emplace(name, Tokenizer::from_json(text, name));
  }
  for (const Case& c : kCases) {
    const Tokenizer& t = tokenizers.at(c.config);
    EXPECT_EQ(t.encode(c.text), c.ids) << c.config << ": " << json(c.text).dump();
    // Round trips through to_json keep the encoding.
    EXPECT_EQ(Tokenizer::from_json(t.to_json(), "copy").encode(c.text), c.ids) << c.config;
  }
}

TEST(TokenizerJson, MergesAsStringsOrPairs) {
  json pairs = build("{}");
  json strings = pairs;
  for (json& m : strings["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer a = Tokenizer::from_json(pairs.dump(), "pairs"), b = Tokenizer::from_json(strings.dump(), "strings");
  for (const char* s : {"hello world", "aaaa", "1212 12"}) EXPECT_EQ(a.encode(s), b.encode(s)) << s;
  EXPECT_EQ(a.encode("hello world"), (std::vector<int32_t>{259, 264}));
}

TEST(TokenizerJson, DecodeAddedAndNormalizedTokens) {
  const Tokenizer t = Tokenizer::from_json(build(kConfigs.at("normalized_added")).dump(), "n");
  // A normalized added token decodes to its normalized content ("ﬁ" -> "fi"), as in `tokenizers`.
  EXPECT_EQ(t.decode(t.encode("xﬁＡ")), "xfiＡ");
  const Tokenizer q = Tokenizer::from_json(build(kConfigs.at("qwenlike")).dump(), "q");
  EXPECT_EQ(q.decode(q.encode("he<|end|>llo <think>")), "he<|end|>llo <think>");
  EXPECT_EQ(q.token_id("<|end|>"), 268);
  EXPECT_EQ(q.token_id("Ġworld"), 264);
  EXPECT_EQ(q.vocab_size(), 270);
}

TEST(TokenizerJson, MissingByteWithoutUnkIsAnError) {
  // `tokenizers` would silently drop the 'x'.
  const Tokenizer t = Tokenizer::from_json(build(R"({"drop_bytes": [120]})").dump(), "no-x.json");
  EXPECT_EQ(t.encode("hello").size(), 1u);
  try {
    t.encode("hexlo");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "no-x.json: no token for 'x' (U+0078) (and the model has no unk_token)");
  }
}

// ---- malformed files --------------------------------------------------------
std::string error_of(const std::string& text) {
  return test::error_of([&] { Tokenizer::from_json(text, "bad/tokenizer.json"); });
}

std::string error_of(const char* text) { return error_of(std::string(text)); }
std::string error_of(const json& j) { return error_of(j.dump()); }

// The error starts with the label and contains `what`.
#define EXPECT_TOKENIZER_ERROR(input, what)                                                      \
  do {                                                                                           \
    const std::string err_ = error_of(input);                                                    \
    EXPECT_EQ(err_.rfind("bad/tokenizer.json: ", 0), 0u) << err_;                                \
    EXPECT_NE(err_.find(what), std::string::npos) << "expected '" << (what) << "' in: " << err_; \
  } while (0)

TEST(TokenizerJsonErrors, NotJson) {
  EXPECT_TOKENIZER_ERROR("", "not valid JSON");
  EXPECT_TOKENIZER_ERROR("{\"model\": ", "not valid JSON");
  EXPECT_TOKENIZER_ERROR("[1, 2]", "expected a JSON object");
  EXPECT_TOKENIZER_ERROR(std::string("{\"a\": \"\xFF\"}"), "not valid JSON");
  EXPECT_TOKENIZER_ERROR(std::string(200, '[') + std::string(200, ']'), "nested more than 128 deep");
}

TEST(TokenizerJsonErrors, Model) {
  json t = build("{}");
  t.erase("model");
  EXPECT_TOKENIZER_ERROR(t, "missing \"model\"");
  t = build("{}");
  t["model"]["type"] = "WordPiece";
  EXPECT_TOKENIZER_ERROR(t, "model.type: unsupported model \"WordPiece\" (only BPE is supported)");
  t = build("{}");
  t["model"].erase("vocab");
  EXPECT_TOKENIZER_ERROR(t, "model: missing \"vocab\"");
  t = build("{}");
  t["model"]["vocab"] = json::array();
  EXPECT_TOKENIZER_ERROR(t, "model.vocab: expected an object");
  t = build("{}");
  t["model"]["vocab"]["x y z"] = 5;
  EXPECT_TOKENIZER_ERROR(t, "model.vocab: id 5 is given to both");
  t = build("{}");
  t["model"]["vocab"]["neg"] = -1;
  EXPECT_TOKENIZER_ERROR(t, "model.vocab[\"neg\"]: expected a token id (an integer), got -1");
  t = build("{}");
  t["model"]["vocab"]["big"] = int64_t(1) << 31;
  EXPECT_TOKENIZER_ERROR(t, "model.vocab[\"big\"]: token id 2147483648 is out of range");
  t = build("{}");
  t["model"]["vocab"]["f"] = 1.5;
  EXPECT_TOKENIZER_ERROR(t, "model.vocab[\"f\"]: expected a token id (an integer), got 1.5");
  t = build("{}");
  t["model"]["vocab"]["s"] = "7";
  EXPECT_TOKENIZER_ERROR(t, "model.vocab[\"s\"]: expected a token id");
  t = build("{}");
  t["model"].erase("merges");
  EXPECT_TOKENIZER_ERROR(t, "model: missing \"merges\"");
  t = build("{}");
  t["model"]["dropout"] = 0.1;
  EXPECT_TOKENIZER_ERROR(t, "model.dropout: BPE dropout 0.1 is not supported");
  t = build("{}");
  t["model"]["unk_token"] = "<unk>";
  EXPECT_TOKENIZER_ERROR(t, "model.unk_token: \"<unk>\" is not in the vocab");
  t = build("{}");
  t["model"]["continuing_subword_prefix"] = "##";
  EXPECT_TOKENIZER_ERROR(t, "model.continuing_subword_prefix: \"##\" is not supported");
}

TEST(TokenizerJsonErrors, Merges) {
  json t = build("{}");
  t["model"]["merges"].push_back({"h", "q!"});
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: \"q!\" is not in the vocab");
  t = build("{}");
  t["model"]["merges"].push_back({"h", "h"});
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: the merged token \"hh\" is not in the vocab");
  t = build("{}");
  t["model"]["merges"].push_back("a b c");
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: expected two tokens separated by one space, got \"a b c\"");
  t = build("{}");
  t["model"]["merges"].push_back("ab");
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: expected two tokens separated by one space");
  t = build("{}");
  t["model"]["merges"].push_back({"a"});
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: expected \"A B\" or [\"A\", \"B\"]");
  t = build("{}");
  t["model"]["merges"].push_back(7);
  EXPECT_TOKENIZER_ERROR(t, "model.merges[12]: expected \"A B\" or [\"A\", \"B\"]");
  t = build("{}");
  t["model"]["merges"] = "h e";
  EXPECT_TOKENIZER_ERROR(t, "model.merges: expected an array");
}

TEST(TokenizerJsonErrors, PreTokenizerNormalizerDecoder) {
  json t = build("{}");
  t["pre_tokenizer"] = nullptr;
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer: missing; a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer");
  t = build("{}");
  t["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer.type: unsupported pre-tokenizer \"Whitespace\"");
  t = build(kConfigs.at("qwenlike"));
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?<x>a|";
  EXPECT_TOKENIZER_ERROR(
      t, "pre_tokenizer.pretokenizers[0].pattern.Regex: invalid regex at offset 7: missing closing parenthesis");
  t = build(kConfigs.at("qwenlike"));
  t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer.pretokenizers[0].behavior: unknown behavior \"Sideways\"");
  t = build(kConfigs.at("qwenlike"));
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "*"}};
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...} or {\"String\": ...}");
  t = build(kConfigs.at("qwenlike"));
  t["pre_tokenizer"]["pretokenizers"].erase(1);
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer: a byte-level BPE tokenizer needs a ByteLevel pre-tokenizer");
  t = build(kConfigs.at("qwenlike"));
  std::swap(t["pre_tokenizer"]["pretokenizers"][0], t["pre_tokenizer"]["pretokenizers"][1]);
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer.pretokenizers[1]: Split after ByteLevel is not supported");
  t = build("{}");
  t["pre_tokenizer"].erase("trim_offsets");
  EXPECT_TOKENIZER_ERROR(t, "pre_tokenizer: missing \"trim_offsets\"");
  t = build("{}");
  t["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_TOKENIZER_ERROR(t, "normalizer.type: unsupported normalizer \"Lowercase\"");
  t = build("{}");
  t["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}};
  EXPECT_TOKENIZER_ERROR(t, "normalizer.normalizers[1].type: unsupported normalizer \"Strip\"");
  t = build("{}");
  t["decoder"] = {{"type", "WordPiece"}};
  EXPECT_TOKENIZER_ERROR(t, "decoder.type: unsupported decoder \"WordPiece\" (only ByteLevel is supported)");
  t = build("{}");
  t.erase("decoder");
  EXPECT_TOKENIZER_ERROR(t, "decoder: missing; a byte-level BPE tokenizer needs the ByteLevel decoder");
}

TEST(TokenizerJsonErrors, AddedTokens) {
  json t = build(R"({"added_tokens": [{"content": "<a>"}, {"content": "<b>"}]})");
  t["added_tokens"][1]["id"] = 300;
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[1]: \"<b>\" has id 300, but Hugging Face tokenizers would give it id 269");
  t = build(R"({"added_tokens": [{"content": "<a>"}, {"content": "<a>"}]})");
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[1]: \"<a>\" appears twice");
  t = build(R"({"added_tokens": [{"content": ""}]})");
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[0].content: empty");
  t = build(R"({"added_tokens": [{"content": "<a>"}]})");
  t["added_tokens"][0].erase("special");
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[0]: missing \"special\"");
  t = build(R"({"added_tokens": [{"content": "<a>"}]})");
  t["added_tokens"][0]["lstrip"] = "yes";
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[0].lstrip: expected true or false, got string");
  // An id that the vocab uses for another token (ids with a gap: the vocab has 269 entries up to id 269).
  t = build(R"({"added_tokens": [{"content": "<a>"}]})");
  t["model"]["vocab"].erase("a");
  t["model"]["vocab"]["zzz"] = 268;
  t["model"]["merges"] = json::array();
  t["added_tokens"][0]["id"] = 268;
  EXPECT_TOKENIZER_ERROR(t, "added_tokens[0]: \"<a>\" has id 268, which the vocab gives to \"zzz\"");
}

}  // namespace
}  // namespace mxrl
