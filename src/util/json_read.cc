#include "util/json_read.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "util/error.h"

namespace mxrl {

std::string json_brief(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

nlohmann::json json_parse(std::string_view text, std::string_view where) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    std::string m = e.what();
    if (m.starts_with("[json.exception.")) {
      const size_t close = m.find("] ");
      if (close != std::string::npos) m = m.substr(close + 2);
    }
    if (where.empty()) fail("not valid JSON: {}", m);
    fail("{}: not valid JSON: {}", where, m);
  }
}

int64_t json_integer(const nlohmann::json& v, int64_t lo, int64_t hi, std::string_view where) {
  if (!v.is_number_integer()) fail("{}: expected an integer, got {} ({})", where, json_brief(v), v.type_name());
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      fail("{}: {} is out of range [{}, {}]", where, u, lo, hi);
    return static_cast<int64_t>(u);
  }
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) fail("{}: {} is out of range [{}, {}]", where, i, lo, hi);
  return i;
}

uint64_t json_unsigned_integer(const nlohmann::json& v, std::string_view where) {
  if (!v.is_number_integer()) fail("{}: expected an integer, got {} ({})", where, json_brief(v), v.type_name());
  if (!v.is_number_unsigned() && v.get<int64_t>() < 0)
    fail("{}: {} is out of range [0, {}]", where, v.get<int64_t>(), std::numeric_limits<uint64_t>::max());
  return v.get<uint64_t>();
}

double json_number(const nlohmann::json& v, std::string_view where) {
  if (!v.is_number()) fail("{}: expected a number, got {} ({})", where, json_brief(v), v.type_name());
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail("{}: {} is not finite", where, json_brief(v));
  return d;
}

bool json_boolean(const nlohmann::json& v, std::string_view where) {
  if (!v.is_boolean()) fail("{}: expected true or false, got {} ({})", where, json_brief(v), v.type_name());
  return v.get<bool>();
}

const std::string& json_string(const nlohmann::json& v, std::string_view where) {
  if (!v.is_string()) fail("{}: expected a string, got {} ({})", where, json_brief(v), v.type_name());
  return v.get_ref<const std::string&>();
}

std::vector<int64_t> json_integers(const nlohmann::json& v, int64_t lo, int64_t hi, std::string_view where) {
  if (!v.is_array()) fail("{}: expected an array of integers, got {} ({})", where, json_brief(v), v.type_name());
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(json_integer(v[i], lo, hi, fmt::format("{}[{}]", where, i)));
  return out;
}

std::vector<int32_t> json_token_ids(const nlohmann::json& v, int64_t vocab, std::string_view where) {
  if (vocab < 1 || vocab > (int64_t{1} << 31)) fail("{}: vocabulary size {} is out of range", where, vocab);
  if (!v.is_array()) fail("{}: expected an array of token ids, got {} ({})", where, json_brief(v), v.type_name());
  std::vector<int32_t> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& e = v[i];
    if (!e.is_number_integer()) fail("{}[{}]: {} is not a token id (expected an integer)", where, i, json_brief(e));
    const bool neg = !e.is_number_unsigned() && e.get<int64_t>() < 0;
    if (neg || e.get<uint64_t>() >= static_cast<uint64_t>(vocab))
      fail("{}[{}]: token id {} is outside the vocabulary [0, {})", where, i, json_brief(e), vocab);
    out.push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return out;
}

}  // namespace mxrl
