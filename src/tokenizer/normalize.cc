// Unicode normalizers (NFC, NFD, NFKC, NFKD) through utf8proc.
#include <utf8proc.h>

#include <cstdlib>

#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl::detail {

namespace {

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  return true;
}

std::string apply_form(std::string_view s, NormForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  // A length (not NUL termination), so embedded NULs survive.
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("normalization failed: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

std::string normalize(std::string_view s, const std::vector<NormForm>& forms) {
  // Every normalization form leaves ASCII text as it is.
  if (forms.empty() || is_ascii(s)) return std::string(s);
  std::string out(s);
  for (NormForm f : forms) out = apply_form(out, f);
  return out;
}

}  // namespace mxrl::detail
