// GPT-2's byte <-> unicode table: byte-level BPE works on strings of 256
// printable stand-ins, one per byte ("Ġ" for a space, "Ċ" for a newline).
#include <unordered_map>

#include "tokenizer/tokenizer_impl.h"

namespace mxrl::detail {

namespace {

struct Tables {
  std::array<char32_t, 256> to_uni{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_uni{};  // every stand-in is below U+0200

  Tables() {
    from_uni.fill(-1);
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      to_uni[b] = direct[b] ? static_cast<char32_t>(b) : next++;
      from_uni[to_uni[b]] = static_cast<int16_t>(b);
      append_utf8(to_utf8[b], to_uni[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() { return tables().to_uni; }

const std::string& byte_char(uint8_t b) { return tables().to_utf8[b]; }

int unicode_to_byte(char32_t c) { return c < 512 ? tables().from_uni[c] : -1; }

std::string to_byte_level(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char ch : raw) out += byte_char(static_cast<uint8_t>(ch));
  return out;
}

void append_byte_level_decoded(std::string& out, std::string_view token) {  // token: valid UTF-8
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    size_t len = 0;
    const int b = unicode_to_byte(decode_utf8(token, i, &len));
    if (b < 0) break;
    out += static_cast<char>(b);
    i += len;
  }
  if (i < token.size()) {  // a character outside the table: the token's own bytes
    out.resize(mark);
    out.append(token);
  }
}

}  // namespace mxrl::detail
