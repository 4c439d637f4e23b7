// Hugging Face byte-level BPE tokenizers (the tokenizer.json format of the
// `tokenizers` library, as Qwen3 ships it), and a character-level tokenizer
// for built-in tasks expressed in the same format.
//
// encode() follows `tokenizers`' Tokenizer::encode(text, add_special_tokens =
// false):
//   1. added tokens with normalized = false are matched in the raw text
//      (leftmost, then longest; single_word, lstrip and rstrip as in
//      `tokenizers`);
//   2. each remaining segment is normalized (NFC, NFD, NFKC, NFKD or a
//      Sequence of them; utf8proc), and added tokens with normalized = true are
//      matched in the result;
//   3. the pre-tokenizer splits each segment: Split steps (a regex or a
//      literal string; every SplitDelimiterBehavior and `invert`), then
//      ByteLevel (optional prefix space, optional GPT-2 regex) maps each
//      piece's bytes through the GPT-2 byte-to-unicode table. Regexes are
//      Oniguruma's (Ruby syntax) in `tokenizers`; here they run on PCRE2 (UTF,
//      UCP, multiline), with \s \S \h \H \w \W \b \B rewritten to Oniguruma's
//      meaning and matches iterated as Oniguruma's find_iter does. Characters
//      newer than PCRE2's Unicode tables (Unicode 14 for PCRE2 10.42) may be
//      classed differently than in `tokenizers`;
//   4. the BPE model merges each piece by merge rank, lowest first (leftmost
//      among equal ranks), with unk_token / fuse_unk / byte_fallback /
//      ignore_merges as in `tokenizers`.
// Supported tokenizer.json: model BPE; pre_tokenizer ByteLevel alone or a
// Sequence of Split steps ending in ByteLevel; decoder ByteLevel. Anything else
// is rejected with an error naming the file and the problem. truncation,
// padding and post_processor are kept for to_json() but never applied: encode
// adds no special tokens, and never truncates or pads.
//
// Where this deliberately differs from `tokenizers`:
//   - a character with no token (no vocab entry, no unk_token, no byte
//     fallback) is an error; `tokenizers` silently drops it;
//   - an added token that is not in the vocab decodes to its content verbatim
//     (normalized when its `normalized` flag is set); `tokenizers` sends it
//     through the ByteLevel decoder, which garbles contents with Latin-1
//     characters (e.g. "é" becomes U+FFFD);
//   - tokenizer.json files where `tokenizers` would renumber an added token
//     (it ignores the ids in the file and assigns its own) are rejected, so the
//     ids here always agree with `tokenizers`.
//
// A Tokenizer is immutable and cheap to copy (copies share state); all const
// methods may be called from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mxrl {

namespace detail {
struct Impl;
}

class Tokenizer {
 public:
  // A tokenizer.json file, or a directory holding one. Errors name the file.
  static Tokenizer load(const std::string& path);
  // Parses tokenizer.json text; every error message starts with `label`.
  static Tokenizer from_json(std::string_view json, const std::string& label);

  // Token ids of `text` (no special tokens added). Throws mxrl::Error on
  // invalid UTF-8 and on a character that has no token.
  std::vector<int32_t> encode(std::string_view text) const;
  // The text of `ids`; byte sequences that are not valid UTF-8 (a character
  // cut between ids) become U+FFFD as in `tokenizers`. Throws on an unknown id.
  std::string decode(std::span<const int32_t> ids) const;

  // Largest id + 1, added tokens included.
  int32_t vocab_size() const;
  // The id of an added token ("<|im_end|>") or of a vocab token (in its
  // byte-level spelling, e.g. "Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The label errors use (the file path for load()).
  const std::string& label() const;

  // tokenizer.json text that `tokenizers` (and from_json) load to the same
  // tokenizer.
  std::string to_json() const;
  // Writes to_json() to `path` atomically (into path/tokenizer.json when
  // `path` is a directory).
  void save(const std::string& path) const;

 private:
  explicit Tokenizer(std::shared_ptr<const detail::Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::Impl> impl_;
};

// A character-level tokenizer for built-in tasks (digits, arithmetic, short
// lists...): every character of `charset` (ASCII, no repeats) is one token,
// with ids 0, 1, ... in charset order, and the special tokens follow as added
// tokens (ids charset.size(), ...) matched anywhere in the text. It is a
// byte-level BPE tokenizer.json with no merges, so it loads through the same
// path (and in `tokenizers`). Encoding a character outside the charset is an
// error naming the character.
Tokenizer make_char_tokenizer(std::string_view charset, const std::vector<std::string>& special_tokens);

// The built-in tasks' characters (tasks/tasks.h) and the tokenizer `mxrl init`
// gives preset models: these characters, then <|endoftext|>, <|im_start|>,
// <|im_end|> (vocabulary 86).
inline constexpr std::string_view kBuiltinCharset =
    "0123456789+-*/=()<>[],.:;?!'\" \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
Tokenizer builtin_char_tokenizer();

}  // namespace mxrl
