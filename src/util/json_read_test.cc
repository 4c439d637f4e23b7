#include "util/json_read.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {

using test::error_of;

using nlohmann::json;

TEST(JsonRead, IntegerRefusesFloatsBoolsStringsAndOutOfRange) {
  EXPECT_EQ(json_integer(json::parse("7"), 0, 10, "f:1: \"x\""), 7);
  EXPECT_EQ(json_integer(json::parse("-3"), -5, 10, "w"), -3);
  EXPECT_EQ(error_of([] { json_integer(json::parse("2.5"), 0, 10, "f:1: \"x\""); }),
            "f:1: \"x\": expected an integer, got 2.5 (number)");
  EXPECT_NE(error_of([] { json_integer(json::parse("3.0"), 0, 10, "w"); }).find("expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { json_integer(json::parse("true"), 0, 10, "w"); }).find("(boolean)"), std::string::npos);
  EXPECT_NE(error_of([] { json_integer(json::parse("\"7\""), 0, 10, "w"); }).find("(string)"), std::string::npos);
  EXPECT_EQ(error_of([] { json_integer(json::parse("11"), 0, 10, "w"); }), "w: 11 is out of range [0, 10]");
  EXPECT_EQ(error_of([] { json_integer(json::parse("-1"), 0, 10, "w"); }), "w: -1 is out of range [0, 10]");
  // nlohmann stores non-negative literals as unsigned: the lower bound holds for them too.
  EXPECT_EQ(error_of([] { json_integer(json::parse("0"), 1, 10, "w"); }), "w: 0 is out of range [1, 10]");
  EXPECT_EQ(error_of([] { json_integer(json::parse("-7"), -5, 10, "w"); }), "w: -7 is out of range [-5, 10]");
  // Values nlohmann stores as unsigned, and one past uint64 (parsed as a float).
  EXPECT_NE(error_of([] { json_integer(json::parse("18446744073709551615"), 0, INT64_MAX, "w"); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              json_integer(json::parse("18446744073709551616"), 0, INT64_MAX, "w");
            }).find("expected an integer"),
            std::string::npos);
  EXPECT_EQ(json_unsigned_integer(json::parse("18446744073709551615"), "w"), UINT64_MAX);
  EXPECT_NE(error_of([] { json_unsigned_integer(json::parse("-1"), "w"); }).find("out of range"), std::string::npos);
}

TEST(JsonRead, TokenIdsAreNeverNarrowed) {
  EXPECT_EQ(json_token_ids(json::parse("[0, 5, 127]"), 128, "w"), (std::vector<int32_t>{0, 5, 127}));
  // The narrowings nlohmann's get<std::vector<int32_t>>() makes silently.
  EXPECT_EQ(error_of([] { json_token_ids(json::parse("[1, 4294967301]"), 128, "in.jsonl:2: \"tokens\""); }),
            "in.jsonl:2: \"tokens\"[1]: token id 4294967301 is outside the vocabulary [0, 128)");
  EXPECT_NE(error_of([] { json_token_ids(json::parse("[1099511627776]"), 128, "w"); }).find("outside the vocabulary"),
            std::string::npos);
  EXPECT_EQ(error_of([] { json_token_ids(json::parse("[1, 2.5]"), 128, "w"); }),
            "w[1]: 2.5 is not a token id (expected an integer)");
  EXPECT_NE(error_of([] { json_token_ids(json::parse("[-1]"), 128, "w"); }).find("outside"), std::string::npos);
  EXPECT_NE(error_of([] { json_token_ids(json::parse("[128]"), 128, "w"); }).find("outside"), std::string::npos);
  EXPECT_NE(error_of([] { json_token_ids(json::parse("{}"), 128, "w"); }).find("expected an array"), std::string::npos);
}

TEST(JsonRead, NumbersBooleansStrings) {
  EXPECT_EQ(json_number(json::parse("3"), "w"), 3.0);
  EXPECT_EQ(json_number(json::parse("1e-6"), "w"), 1e-6);
  EXPECT_NE(error_of([] { json_number(json::parse("\"1e-6\""), "w"); }).find("expected a number"), std::string::npos);
  EXPECT_TRUE(json_boolean(json::parse("true"), "w"));
  EXPECT_NE(error_of([] { json_boolean(json::parse("1"), "w"); }).find("expected true or false"), std::string::npos);
  EXPECT_EQ(json_string(json::parse("\"a\""), "w"), "a");
  EXPECT_NE(error_of([] { json_string(json::parse("null"), "w"); }).find("(null)"), std::string::npos);
  EXPECT_EQ(json_integers(json::parse("[1, 2]"), 0, 5, "w"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(error_of([] { json_integers(json::parse("[1, 9]"), 0, 5, "w"); }), "w[1]: 9 is out of range [0, 5]");
}

TEST(JsonRead, ParseErrorsNameThePlaceWithoutNlohmannsPrefix) {
  EXPECT_EQ(json_parse("{\"a\": 1}", "f:1")["a"], 1);
  const std::string e = error_of([] { json_parse("{\"a\": ", "f:3"); });
  EXPECT_TRUE(e.starts_with("f:3: not valid JSON: ")) << e;
  EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;
}

}  // namespace
}  // namespace mxrl
