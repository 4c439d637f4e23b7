// Internals shared by the tokenizer's source files (not a public header).
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

typedef struct pcre2_real_code_8 pcre2_code_8;
typedef struct pcre2_real_match_data_8 pcre2_match_data_8;

namespace mxrl::detail {

// ---- utf8.cc ----------------------------------------------------------------
// Offset of the first byte that is not part of valid UTF-8, or npos.
size_t find_invalid_utf8(std::string_view s);
// `s` with each invalid sequence replaced by U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view s);
// Decodes the code point at s[i] (s valid UTF-8); sets *len to its byte length.
char32_t decode_utf8(std::string_view s, size_t i, size_t* len);
// Byte length of the character starting at s[i] (1 when s[i] is not a lead byte).
size_t utf8_char_len(std::string_view s, size_t i);
void append_utf8(std::string& out, char32_t c);
// Rust's char::is_whitespace (Unicode White_Space).
bool is_white_space(char32_t c);
// Unicode \w (alphabetic, marks, decimal digits, connector punctuation, joiners).
bool is_word_char(char32_t c);
// A short printable description of the character at s[i] for error messages.
std::string describe_char(std::string_view s, size_t i);

// ---- byte_level.cc ----------------------------------------------------------
// GPT-2's bytes_to_unicode(): byte -> code point (printable), and its inverse.
const std::array<char32_t, 256>& byte_to_unicode();
// The UTF-8 of byte_to_unicode()[b].
const std::string& byte_char(uint8_t b);
// Code point -> byte, or -1 when the code point is not in the table.
int unicode_to_byte(char32_t c);
// The byte-level spelling of raw bytes ("hi there" -> "hiĠthere").
std::string to_byte_level(std::string_view raw);
// Appends the bytes a byte-level token stands for. A token with a character
// outside the table contributes its own UTF-8 bytes, as the ByteLevel decoder
// of `tokenizers` does.
void append_byte_level_decoded(std::string& out, std::string_view token);

// ---- normalize.cc -----------------------------------------------------------
enum class NormForm { NFC, NFD, NFKC, NFKD };
// Applies the forms in order; `s` must be valid UTF-8.
std::string normalize(std::string_view s, const std::vector<NormForm>& forms);

// ---- regex.cc ---------------------------------------------------------------
// A compiled PCRE2 pattern (shared, immutable).
class Regex {
 public:
  // Throws mxrl::Error "<where>: invalid regex at offset N: <PCRE2 message>".
  static Regex compile(std::string_view pattern, bool literal, const std::string& where);
  // Appends the [start, end) of each match as Oniguruma's find_iter (which
  // `tokenizers` uses) reports them: searches resume at the previous match's
  // end, and an empty match right at the previous match's end is skipped.
  // `s` must be valid UTF-8. Throws mxrl::Error when PCRE2 gives up (match
  // limit), naming `label`.
  void find_all(std::string_view s, pcre2_match_data_8* md, const std::string& label,
                std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::shared_ptr<pcre2_code_8> code_;
};

// Match data big enough for group 0 of any pattern; freed by the deleter.
struct MatchDataDeleter {
  void operator()(pcre2_match_data_8* md) const;
};
std::unique_ptr<pcre2_match_data_8, MatchDataDeleter> make_match_data();

// ---- pretokenize.cc ---------------------------------------------------------
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  enum Kind { Split, PrefixSpace } kind = Split;
  Regex regex;  // Split
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
};

// Runs the steps over one normalized segment; appends the non-empty pieces
// (raw bytes: the byte-level mapping is left to the model).
void pre_tokenize(std::string_view segment, const std::vector<PreStep>& steps, pcre2_match_data_8* md,
                  const std::string& label, std::vector<std::string>& pieces);

// ---- added_tokens.cc --------------------------------------------------------
struct AddedToken {
  int32_t id = 0;
  std::string content;
  std::string text;  // what it decodes to: content, normalized when `normalized`
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// One part of a text split around added tokens: an added token's id, or a
// stretch of text between them.
struct Segment {
  int32_t id = -1;  // >= 0: an added token
  std::string_view text;
};

// Leftmost-longest matcher over a set of added tokens (one of the two passes).
class AddedMatcher {
 public:
  // `patterns[i]` is the text to find for tokens[index[i]].
  void build(std::vector<std::pair<std::string, size_t>> patterns);
  bool empty() const { return patterns_.empty(); }
  // Splits `text` as `tokenizers`' AddedVocabulary::find_matches does.
  void split(std::string_view text, const std::vector<AddedToken>& tokens, std::vector<Segment>& out) const;

 private:
  std::vector<std::pair<std::string, size_t>> patterns_;  // longest first
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices into patterns_
};

// ---- vocab.cc ---------------------------------------------------------------
// Token <-> id, both ways (ids may have gaps).
class Vocab {
 public:
  enum class Insert { Ok, DuplicateToken, DuplicateId };
  void reserve(size_t n);
  Insert insert(std::string_view token, int32_t id);
  int32_t find(std::string_view token) const;  // -1 when absent
  std::optional<std::string_view> token(int32_t id) const;
  size_t size() const { return entries_.size(); }
  std::vector<std::pair<int32_t, std::string_view>> by_id() const;  // sorted by id

 private:
  struct Entry {
    uint64_t hash;
    uint32_t off, len;  // in arena_
    int32_t id;
  };
  void rehash(size_t want);
  void place(uint32_t index);
  int32_t find_hashed(std::string_view token, uint64_t h) const;
  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<uint32_t> by_token_, by_id_;  // open addressing: entry index + 1, 0 = empty
};

// (left id, right id) -> (rank, merged id).
class MergeMap {
 public:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void reserve(size_t n);
  void set(uint64_t key, Merge m);  // a repeated key takes the later value
  const Merge* find(uint64_t key) const;
  bool empty() const { return size_ == 0; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// ---- bpe.cc -----------------------------------------------------------------
struct Bpe {
  Vocab vocab;
  std::vector<std::pair<int32_t, int32_t>> merges;  // as listed (for to_json)
  MergeMap merge_map;
  std::array<int32_t, 256> byte_id{};  // id of each byte's token, or -1
  std::optional<std::string> unk_token;
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;

  // The ids of one pre-tokenized piece (raw bytes). Throws for a byte with no
  // token when there is neither byte fallback nor unk_token.
  void encode_word(std::string_view raw, const std::string& label, std::vector<int32_t>& out) const;

  // Cache of encode_word for short pieces.
  void encode_cached(std::string_view raw, const std::string& label, std::vector<int32_t>& out) const;
  mutable std::shared_mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;
};

// ---- the tokenizer ----------------------------------------------------------
struct Impl {
  std::string label;
  // Kept as loaded, re-emitted by to_json.
  nlohmann::json version = "1.0", truncation, padding, normalizer_json, pre_tokenizer_json, post_processor,
                 decoder_json;
  std::optional<double> dropout;                                             // model.dropout as given (null or 0)
  std::optional<std::string> continuing_subword_prefix, end_of_word_suffix;  // null or ""

  std::vector<AddedToken> added;
  std::unordered_map<std::string, size_t> added_by_content;  // -> index in added
  std::unordered_map<int32_t, size_t> added_by_id;           // -> index in added (only ids not in the vocab)
  AddedMatcher raw_matcher, normalized_matcher;
  std::vector<NormForm> normalizer;
  std::vector<PreStep> pre_steps;
  Bpe bpe;
  int32_t vocab_size = 0;
};

std::shared_ptr<Impl> parse_tokenizer_json(std::string_view text, const std::string& label);
std::string write_tokenizer_json(const Impl& impl);

}  // namespace mxrl::detail
