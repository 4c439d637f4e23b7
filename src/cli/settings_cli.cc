#include "cli/settings_cli.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/error.h"

namespace mxrl {

CLI::Validator within(const SettingBounds& b) {
  // As CLI11 names its own checks in --help (INT:POSITIVE=16).
  const bool has_lo = std::isfinite(b.lo), has_hi = std::isfinite(b.hi);
  std::string desc;
  if (has_lo && has_hi)
    desc = fmt::format("IN {}{}, {}{}", b.lo_open ? "(" : "[", b.lo, b.hi, b.hi_open ? ")" : "]");
  else if (has_lo && b.lo == 0)
    desc = b.lo_open ? "POSITIVE" : "NONNEGATIVE";
  else if (has_lo)
    desc = fmt::format("{} {}", b.lo_open ? "ABOVE" : "MIN", b.lo);
  else if (has_hi)
    desc = fmt::format("{} {}", b.hi_open ? "BELOW" : "MAX", b.hi);
  return CLI::Validator(
      [b](std::string& s) -> std::string {
        const char* begin = s.c_str();
        char* end = nullptr;
        const double v = std::strtod(begin, &end);
        if (end == begin || *end != '\0') return "";  // not a number: the conversion says so
        if (b.contains(v)) return "";
        return fmt::format("{}, got {}", b.text(), s);
      },
      desc);
}

void refuse_given_on_resume(const std::string& flag) {
  fail("--resume continues a run with its original settings; {} cannot be changed", flag);
}

}  // namespace mxrl
