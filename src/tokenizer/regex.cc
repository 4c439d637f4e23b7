// PCRE2 patterns for the Split pre-tokenizer, iterated the way Oniguruma's
// find_iter (used by `tokenizers`) iterates.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl::detail {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof buf);
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buf), n);
}

// Oniguruma's White_Space; PCRE2's \s also matches U+180E (no longer a space
// since Unicode 6.3).
constexpr const char* kSpaceItems =
    R"(\t\n\x0b\f\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";
constexpr const char* kHexItems = "0-9a-fA-F";
// Oniguruma's word characters (letters, marks, numbers, connector
// punctuation); PCRE2 10.42's UCP \w lacks marks and most of Pc.
constexpr const char* kWordItems = R"(\p{L}\p{M}\p{N}\p{Pc})";

// Rewrites the escapes whose meaning differs between Oniguruma's Ruby syntax
// (what `tokenizers` compiles) and PCRE2: \s \S (U+180E), \h \H (hex digits in
// Ruby, horizontal space in PCRE2), \w \W \b \B (word characters). Inside a
// character class only \s, \h and \w can be rewritten; \S, \H and \W stay
// PCRE2's there.
std::string from_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 'Q') {  // \Q...\E is literal
        const size_t e = p.find("\\E", i + 2);
        const size_t end = e == std::string_view::npos ? p.size() : e + 2;
        out.append(p.substr(i, end - i));
        i = end;
        continue;
      }
      const char* items = d == 's' || d == 'S'   ? kSpaceItems
                          : d == 'h' || d == 'H' ? kHexItems
                          : d == 'w' || d == 'W' ? kWordItems
                                                 : nullptr;
      if ((d == 'b' || d == 'B') && !in_class) {
        const std::string w = std::string("[") + kWordItems + "]";
        out += d == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                        : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
      } else if (items && in_class && (d == 's' || d == 'h' || d == 'w')) {
        out += items;
      } else if (items && !in_class) {
        out += (d == 'S' || d == 'H' || d == 'W') ? "[^" : "[";
        out += items;
        out += ']';
      } else {
        out += c;
        out += d;
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      if (i < p.size() && p[i] == ']') out += p[i++];  // a leading ] is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
      const size_t e = p.find(":]", i + 2);
      const size_t end = e == std::string_view::npos ? i + 1 : e + 2;
      out.append(p.substr(i, end - i));
      i = end;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

Regex Regex::compile(std::string_view pattern, bool literal, const std::string& where) {
  // UCP: \s, \w, \d and POSIX classes are Unicode-aware, as in Oniguruma.
  // MULTILINE: ^ and $ match at line boundaries, as in Oniguruma's Ruby syntax.
  // \C could end a match inside a character; it is refused.
  const uint32_t options =
      literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C);
  int err = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = literal ? std::string(pattern) : from_oniguruma(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                                   &offset, nullptr);
  if (!code) {
    if (translated != pattern)  // offsets refer to the rewritten pattern
      fail("{}: invalid regex: {} (in the pattern as rewritten for PCRE2: {})", where, pcre2_message(err),
           nlohmann::json(translated).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    fail("{}: invalid regex at offset {}: {}", where, offset, pcre2_message(err));
  }
  // The JIT is an optimization: without it pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Regex r;
  r.code_.reset(code, pcre2_code_free);
  return r;
}

void Regex::find_all(std::string_view s, pcre2_match_data* md, const std::string& label,
                     std::vector<std::pair<size_t, size_t>>& out) const {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= s.size()) {
    int rc = pcre2_match(code_.get(), subject, s.size(), last_end, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking on the heap
      rc = pcre2_match(code_.get(), subject, s.size(), last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("{}: pre-tokenizer regex failed on a {}-byte piece: {}", label, s.size(), pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (start > end || end > s.size())  // only \K in a lookaround does this; PCRE2 refuses it by default
      fail("{}: pre-tokenizer regex reported a match ending before its start", label);
    if (start == end && have_last && last_match_end == end) {
      last_end += last_end < s.size() ? utf8_char_len(s, last_end) : 1;
      continue;
    }
    last_end = end;
    last_match_end = end;
    have_last = true;
    out.emplace_back(start, end);
  }
}

void MatchDataDeleter::operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }

std::unique_ptr<pcre2_match_data, MatchDataDeleter> make_match_data() {
  // One ovector pair: only group 0 is read (PCRE2 then returns 0 for patterns with groups).
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (!md) throw std::bad_alloc();
  return std::unique_ptr<pcre2_match_data, MatchDataDeleter>(md);
}

}  // namespace mxrl::detail
