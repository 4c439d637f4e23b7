#include "util/settings.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

namespace {
std::string num(double v) { return fmt::format("{}", v); }
}  // namespace

bool SettingBounds::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string SettingBounds::text() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi)
    return fmt::format("must be in {}{}, {}{}", lo_open ? "(" : "[", num(lo), num(hi), hi_open ? ")" : "]");
  if (has_lo) return fmt::format("must be {} {}", lo_open ? ">" : ">=", num(lo));
  if (has_hi) return fmt::format("must be {} {}", hi_open ? "<" : "<=", num(hi));
  return "";
}

namespace detail {

std::string flag_of(std::string_view key) {
  const size_t dot = key.rfind('.');
  std::string f(dot == std::string_view::npos ? key : key.substr(dot + 1));
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

namespace {
[[noreturn]] void wrong(const nlohmann::json& v, std::string_view ctx, std::string_view key, std::string_view what) {
  fail("{}: {} must be {}, got {} ({})", ctx, key, what, json_brief(v), v.type_name());
}
}  // namespace

int64_t read_int(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_number_integer()) wrong(v, ctx, key, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail("{}: {} is out of range: {}", ctx, key, v.dump());
  return v.get<int64_t>();
}

uint64_t read_uint(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_number_integer()) wrong(v, ctx, key, "an integer");
  if (!v.is_number_unsigned() && v.get<int64_t>() < 0) fail("{}: {} must be >= 0, got {}", ctx, key, v.dump());
  return v.get<uint64_t>();
}

double read_number(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_number()) wrong(v, ctx, key, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) not_finite(ctx, key, d);
  return d;
}

bool read_bool(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_boolean()) wrong(v, ctx, key, "true or false");
  return v.get<bool>();
}

std::string read_string(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_string()) wrong(v, ctx, key, "a string");
  return v.get<std::string>();
}

std::vector<std::string> read_strings(const nlohmann::json& v, std::string_view ctx, std::string_view key) {
  if (!v.is_array()) wrong(v, ctx, key, "an array of strings");
  std::vector<std::string> out;
  for (const nlohmann::json& e : v) out.push_back(read_string(e, ctx, key));
  return out;
}

int read_enum(const nlohmann::json& v, const std::vector<std::string>& names, std::string_view ctx,
              std::string_view key) {
  if (v.is_string())
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == v.get<std::string>()) return static_cast<int>(i);
  wrong(v, ctx, key, fmt::format("one of \"{}\"", fmt::join(names, "\", \"")));
}

void missing(std::string_view ctx, std::string_view key) { fail("{}: missing \"{}\"", ctx, key); }

void out_of_bounds(std::string_view ctx, std::string_view key, const SettingBounds& b, double v) {
  fail("{}: {} {}, got {}", ctx, key, b.text(), num(v));
}

void not_finite(std::string_view ctx, std::string_view key, double v) {
  fail("{}: {} must be a finite number, got {}", ctx, key, num(v));
}

const nlohmann::json* find(const nlohmann::json& j, std::string_view path) {
  const nlohmann::json* at = &j;
  while (true) {
    const size_t dot = path.find('.');
    const std::string part(path.substr(0, dot));
    if (!at->is_object()) return nullptr;
    auto it = at->find(part);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string_view::npos) return at;
    path.remove_prefix(dot + 1);
  }
}

nlohmann::json& slot(nlohmann::json& j, std::string_view path) {
  nlohmann::json* at = &j;
  while (true) {
    const size_t dot = path.find('.');
    at = &(*at)[std::string(path.substr(0, dot))];
    if (dot == std::string_view::npos) return *at;
    path.remove_prefix(dot + 1);
  }
}

namespace {
void check_keys_at(const nlohmann::json& j, const std::vector<std::string>& keys, const std::string& prefix,
                   std::string_view ctx) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix + it.key();
    if (std::find(keys.begin(), keys.end(), path) != keys.end()) continue;
    const bool parent = std::any_of(keys.begin(), keys.end(), [&](const std::string& k) {
      return k.size() > path.size() && k.compare(0, path.size(), path) == 0 && k[path.size()] == '.';
    });
    if (!parent) fail("{}: unknown key '{}'", ctx, path);
    if (!it.value().is_object()) wrong(it.value(), ctx, path, "an object");
    check_keys_at(it.value(), keys, path + ".", ctx);
  }
}
}  // namespace

void check_keys(const nlohmann::json& j, const std::vector<std::string>& keys, std::string_view ctx) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", ctx, j.type_name());
  check_keys_at(j, keys, "", ctx);
}

}  // namespace detail
}  // namespace mxrl
