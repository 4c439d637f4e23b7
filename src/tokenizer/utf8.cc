// UTF-8 validation, lossy repair and the character classes added-token
// matching needs.
#include <fmt/format.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer_impl.h"

namespace mxrl::detail {

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid; then
// *bad is the length of its maximal invalid prefix (at least 1), the unit
// Rust's from_utf8_lossy replaces with one U+FFFD.
size_t valid_seq(std::string_view s, size_t i, size_t* bad) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b = at(i);
  if (b < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    const uint8_t lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (i + k >= s.size() || at(i + k) < lo_k || at(i + k) > hi_k) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_seq(s, i, &bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view s) {
  if (find_invalid_utf8(s) == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0, bad = 0;
  while (i < s.size()) {
    const size_t n = valid_seq(s, i, &bad);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto at = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[k])); };
  const char32_t b = at(i);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  if (b < 0xE0) {
    *len = 2;
    return ((b & 0x1F) << 6) | (at(i + 1) & 0x3F);
  }
  if (b < 0xF0) {
    *len = 3;
    return ((b & 0x0F) << 12) | ((at(i + 1) & 0x3F) << 6) | (at(i + 2) & 0x3F);
  }
  *len = 4;
  return ((b & 0x07) << 18) | ((at(i + 1) & 0x3F) << 12) | ((at(i + 2) & 0x3F) << 6) | (at(i + 3) & 0x3F);
}

size_t utf8_char_len(std::string_view s, size_t i) {
  size_t bad = 0;
  const size_t n = valid_seq(s, i, &bad);
  return n == 0 ? 1 : n;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
  }
}

std::string describe_char(std::string_view s, size_t i) {
  size_t bad = 0;
  const size_t n = valid_seq(s, i, &bad);
  if (n == 0) return fmt::format("byte 0x{:02X}", static_cast<uint8_t>(s[i]));
  size_t len = 0;
  const char32_t c = decode_utf8(s, i, &len);
  if (c >= 0x21 && c < 0x7F) return fmt::format("'{}' (U+{:04X})", static_cast<char>(c), static_cast<uint32_t>(c));
  if (c < 0x80 || is_white_space(c)) return fmt::format("U+{:04X}", static_cast<uint32_t>(c));
  return fmt::format("'{}' (U+{:04X})", s.substr(i, n), static_cast<uint32_t>(c));
}

}  // namespace mxrl::detail
