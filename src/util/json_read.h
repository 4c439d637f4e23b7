// Strict readers for values in parsed JSON: each returns the value or throws
// mxrl::Error "<where>: <problem>", where `where` names the file, the line and
// the field (e.g. "in.jsonl:3: \"tokens\"[5]"). No silent narrowing: 2.5, true,
// "7" and 2^40 are not an int32 token id. nlohmann's own get<int>() truncates
// floats and wraps large integers; nothing in mxrl reads numbers through it.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxrl {

// An integer in [lo, hi]. Floats (even 3.0), booleans and strings are refused.
int64_t json_integer(const nlohmann::json& v, int64_t lo, int64_t hi, std::string_view where);
// An integer in [0, 2^64 - 1] (seeds).
uint64_t json_unsigned_integer(const nlohmann::json& v, std::string_view where);
// Any finite JSON number (integers included).
double json_number(const nlohmann::json& v, std::string_view where);
bool json_boolean(const nlohmann::json& v, std::string_view where);
const std::string& json_string(const nlohmann::json& v, std::string_view where);
// An array of integers, each in [lo, hi]; errors name the element's index.
std::vector<int64_t> json_integers(const nlohmann::json& v, int64_t lo, int64_t hi, std::string_view where);
// Token ids: an array of integers in [0, vocab). vocab <= 2^31.
std::vector<int32_t> json_token_ids(const nlohmann::json& v, int64_t vocab, std::string_view where);

// Parses text as JSON, or throws "<where>: not valid JSON: <reason>" (without
// nlohmann's "[json.exception...]" prefix; an empty `where` drops "<where>: ").
nlohmann::json json_parse(std::string_view text, std::string_view where);

// A short rendering of a JSON value for an error message (at most ~40 chars).
std::string json_brief(const nlohmann::json& v);

}  // namespace mxrl
