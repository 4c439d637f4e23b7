// Matching added tokens ("<|im_start|>", ...) in text, as `tokenizers`'
// AddedVocabulary does: leftmost-longest non-overlapping matches, then the
// single_word, lstrip and rstrip rules.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"

namespace mxrl::detail {

namespace {

// The last character of s[0, end) is a word character.
bool ends_with_word(std::string_view s, size_t end) {
  if (end == 0) return false;
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return is_word_char(decode_utf8(s, i, &len));
}

bool starts_with_word(std::string_view s, size_t start) {
  if (start >= s.size()) return false;
  size_t len = 0;
  return is_word_char(decode_utf8(s, start, &len));
}

// Start of the run of white space that ends at `end`.
size_t white_space_before(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t k = i - 1;
    while (k > 0 && (static_cast<uint8_t>(s[k]) & 0xC0) == 0x80) --k;
    size_t len = 0;
    if (!is_white_space(decode_utf8(s, k, &len))) break;
    i = k;
  }
  return i;
}

// End of the run of white space that starts at `start`.
size_t white_space_after(std::string_view s, size_t start) {
  size_t i = start;
  while (i < s.size()) {
    size_t len = 0;
    if (!is_white_space(decode_utf8(s, i, &len))) break;
    i += len;
  }
  return i;
}

}  // namespace

void AddedMatcher::build(std::vector<std::pair<std::string, size_t>> patterns) {
  patterns.erase(std::remove_if(patterns.begin(), patterns.end(), [](const auto& p) { return p.first.empty(); }),
                 patterns.end());
  std::stable_sort(patterns.begin(), patterns.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  patterns_ = std::move(patterns);
  for (auto& v : by_first_byte_) v.clear();
  for (uint32_t i = 0; i < patterns_.size(); ++i)
    by_first_byte_[static_cast<uint8_t>(patterns_[i].first[0])].push_back(i);
}

void AddedMatcher::split(std::string_view text, const std::vector<AddedToken>& tokens,
                         std::vector<Segment>& out) const {
  size_t start_offset = 0;  // end of what has been emitted
  size_t pos = 0;           // where the next search starts (the previous match's end)
  while (pos < text.size()) {
    // Leftmost match, longest at that position (patterns_ are longest first).
    size_t mstart = text.size(), mlen = 0, which = 0;
    for (size_t i = pos; i < text.size() && mlen == 0; ++i) {
      for (uint32_t k : by_first_byte_[static_cast<uint8_t>(text[i])]) {
        const std::string& p = patterns_[k].first;
        if (text.size() - i >= p.size() && text.compare(i, p.size(), p) == 0) {
          mstart = i;
          mlen = p.size();
          which = k;
          break;
        }
      }
    }
    if (mlen == 0) break;
    pos = mstart + mlen;
    const AddedToken& tok = tokens[patterns_[which].second];
    size_t start = mstart, stop = mstart + mlen;
    if (tok.single_word && (ends_with_word(text, start) || starts_with_word(text, stop))) continue;
    if (tok.lstrip) start = std::max(white_space_before(text, start), start_offset);
    if (tok.rstrip) stop = white_space_after(text, stop);
    if (start_offset < start) out.push_back({-1, text.substr(start_offset, start - start_offset)});
    out.push_back({tok.id, {}});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({-1, text.substr(start_offset)});
}

}  // namespace mxrl::detail
