// libFuzzer target for the tokenizer. The input is used twice:
//  (a) as tokenizer.json text: it must load or fail with mxrl::Error; a
//      tokenizer that loads must encode, decode and survive to_json ->
//      from_json with the same encodings;
//  (b) as text for a character tokenizer and a small byte-level BPE (NFC,
//      Qwen's split regex, merges, added tokens): valid UTF-8 must encode (the
//      BPE covers every byte) and decode back; anything else must fail with
//      mxrl::Error;
//  (c) as a Split regex (the first line) and text (the rest) for a byte-level
//      BPE without a normalizer: the regex compiles or fails with mxrl::Error,
//      and unless the behavior removes text, decode(encode(text)) == text.
// Any other exception, crash or sanitizer report is a bug.
#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

using mxrl::Tokenizer;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// Independent of the tokenizer's own check.
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0, n = static_cast<utf8proc_ssize_t>(s.size());
  while (i < n) {
    utf8proc_int32_t c;
    const utf8proc_ssize_t len = utf8proc_iterate(p + i, n - i, &c);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

void check_ids(const Tokenizer& t, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) check(id >= 0 && id < t.vocab_size());
}

const Tokenizer& char_tokenizer() {
  static const Tokenizer t =
      mxrl::make_char_tokenizer("0123456789+-*/=()<>[],.:;?!'\" \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                {"<|endoftext|>", "<|im_start|>", "<|im_end|>"});
  return t;
}

// GPT-2's byte-level spelling of byte b (bytes_to_unicode), computed here
// independently of the tokenizer's table.
std::string byte_token(int b) {
  const auto printable = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  uint32_t cp = b;
  if (!printable(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += !printable(x);
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Every byte, a few merges, and added tokens with each flag.
const Tokenizer& small_bpe() {
  static const Tokenizer t = [] {
    using nlohmann::json;
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_token(b)] = b;
    json merges = json::array();
    const std::vector<std::pair<std::string, std::string>> m = {
        {"h", "e"},   {"l", "l"},     {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}, {"l", "d"},
        {"Ġw", "or"}, {"Ġwor", "ld"}, {"a", "a"},   {"aa", "aa"},  {"1", "2"}, {"Ġ", "Ġ"}, {"Ã", "©"}};
    for (const auto& [a, b] : m) {
      if (!vocab.contains(a + b)) vocab[a + b] = vocab.size();
      merges.push_back({a, b});
    }
    const int64_t n = static_cast<int64_t>(vocab.size());
    auto added = [](int64_t id, const char* content, bool sw, bool l, bool r, bool norm) {
      return json{{"id", id},    {"content", content}, {"single_word", sw}, {"lstrip", l},
                  {"rstrip", r}, {"normalized", norm}, {"special", true}};
    };
    const json doc = {
        {"added_tokens",
         {added(n, "<|end|>", false, false, false, false), added(n + 1, "<think>", false, true, true, false),
          added(n + 2, "ab", true, false, false, false), added(n + 3, "[Q]", false, false, false, true)}},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
        {"decoder",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    return Tokenizer::from_json(doc.dump(), "fuzz small bpe");
  }();
  return t;
}

// The vocab and merges of small_bpe(), with a Split pre-tokenizer on `pattern`.
std::string split_tokenizer_json(std::string_view pattern, const char* behavior, bool invert, bool literal) {
  using nlohmann::json;
  static const json model = nlohmann::json::parse(small_bpe().to_json())["model"];
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  const json doc = {{"pre_tokenizer",
                     {{"type", "Sequence"},
                      {"pretokenizers",
                       {{{"type", "Split"},
                         {"pattern", {{literal ? "String" : "Regex", std::string(pattern)}}},
                         {"behavior", behavior},
                         {"invert", invert}},
                        byte_level}}}},
                    {"decoder", byte_level},
                    {"model", model}};
  return doc.dump();
}

// Encodes with `t`; on success checks the ids and that they decode.
bool try_encode(const Tokenizer& t, std::string_view text, std::vector<int32_t>* ids, std::string* back) {
  try {
    *ids = t.encode(text);
  } catch (const mxrl::Error&) {
    return false;
  }
  check_ids(t, *ids);
  *back = t.decode(*ids);  // every id from encode decodes
  check(valid_utf8(*back));
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<int32_t> ids, ids2;
  std::string back, back2;

  // (a) The input as tokenizer.json.
  try {
    const Tokenizer t = Tokenizer::from_json(in, "fuzz");
    const Tokenizer copy = Tokenizer::from_json(t.to_json(), "fuzz copy");  // must not throw
    check(copy.vocab_size() == t.vocab_size());
    check(copy.to_json() == t.to_json());
    const std::string_view sample = "Hello, world! 12+34 <|im_end|>\n  é e\xCC\x81 日本";
    for (std::string_view text : {sample, in.substr(0, 256)}) {
      const bool ok = try_encode(t, text, &ids, &back);
      const bool ok2 = try_encode(copy, text, &ids2, &back2);
      check(ok == ok2);
      if (ok) check(ids == ids2 && back == back2);
    }
  } catch (const mxrl::Error&) {
  }

  // (b) The input as text.
  if (try_encode(char_tokenizer(), in, &ids, &back)) check(back == in);
  const bool valid = valid_utf8(in);
  const bool ok = try_encode(small_bpe(), in, &ids, &back);
  check(ok == valid);  // every byte has a token: only invalid UTF-8 fails
  if (ok) {
    // ASCII is its own NFC; only "<think>" (lstrip, rstrip) drops characters.
    if (is_ascii(in) && in.find("<think>") == std::string_view::npos) check(back == in);
    // Encoding the decoded text again gives the same ids (it is already normalized).
    check(try_encode(small_bpe(), back, &ids2, &back2));
    check(ids2 == ids && back2 == back);
  }

  // (c) A Split regex (first line, when it is valid UTF-8) and text (the rest).
  const size_t nl = in.find('\n');
  if (nl != std::string_view::npos && nl <= 200 && size > nl + 1 && valid_utf8(in.substr(0, nl + 1))) {
    static const char* kBehaviors[] = {"Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous", "Removed"};
    const uint8_t mode = nl > 0 ? static_cast<uint8_t>(in[0]) : 0;  // the first byte picks the options too
    const char* behavior = kBehaviors[mode % 5];
    const std::string_view text = in.substr(nl + 1);
    try {
      const Tokenizer t =
          Tokenizer::from_json(split_tokenizer_json(in.substr(0, nl), behavior, mode & 8, mode & 16), "fuzz split");
      if (try_encode(t, text, &ids, &back) && mode % 5 != 4) check(back == text);
    } catch (const mxrl::Error&) {
    }
  }
  return 0;
}
