// make_char_tokenizer: one token per character, special tokens, errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "testing/errors.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mxrl {
namespace {

using test::error_of;

constexpr std::string_view kCharset =
    "0123456789+-*/=()<>[],.:;?!'\" \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const std::vector<std::string> kSpecials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

TEST(CharTokenizer, OneTokenPerCharacter) {
  const Tokenizer t = make_char_tokenizer(kCharset, kSpecials);
  EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(kCharset.size() + kSpecials.size()));
  EXPECT_EQ(t.encode("12+7=19"), (std::vector<int32_t>{1, 2, 10, 7, 14, 1, 9}));
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  // Space and newline are ids 29 and 30 (their byte-level spellings are "Ġ" and "Ċ").
  EXPECT_EQ(t.encode("a b\n"), (std::vector<int32_t>{31, 29, 32, 30}));
  EXPECT_EQ(t.token_id("Ġ"), 29);
  EXPECT_EQ(t.token_id("a"), 31);
  for (size_t i = 0; i < kCharset.size(); ++i) {
    const auto ids = t.encode(kCharset.substr(i, 1));
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(ids[0], static_cast<int32_t>(i));
  }
}

TEST(CharTokenizer, SpecialTokensMatchedInText) {
  const Tokenizer t = make_char_tokenizer(kCharset, kSpecials);
  const int32_t n = static_cast<int32_t>(kCharset.size());
  EXPECT_EQ(t.token_id("<|endoftext|>"), n);
  EXPECT_EQ(t.token_id("<|im_start|>"), n + 1);
  EXPECT_EQ(t.token_id("<|im_end|>"), n + 2);
  EXPECT_EQ(t.encode("<|im_start|>2+2<|im_end|><|endoftext|>"), (std::vector<int32_t>{n + 1, 2, 10, 2, n + 2, n}));
  // Text that merely looks like a special token is characters; one outside
  // the charset ('|') is an error.
  EXPECT_EQ(t.encode("<imend>").size(), 7u);
  EXPECT_THROW(t.encode("<|im_end|"), Error);
  EXPECT_EQ(t.decode(std::vector<int32_t>{n + 1, 7, n + 2}), "<|im_start|>7<|im_end|>");
}

TEST(CharTokenizer, RoundTrips) {
  const Tokenizer t = make_char_tokenizer(kCharset, kSpecials);
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    const int n = rng() % 40;
    for (int k = 0; k < n; ++k) {
      if (rng() % 10 == 0)
        s += kSpecials[rng() % kSpecials.size()];
      else
        s += kCharset[rng() % kCharset.size()];
    }
    const auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    for (int32_t id : ids) EXPECT_LT(id, t.vocab_size());
  }
  // Through tokenizer.json and back.
  const Tokenizer again = Tokenizer::from_json(t.to_json(), "copy");
  EXPECT_EQ(again.encode("<|im_start|>(3*4)-1<|im_end|>"), t.encode("<|im_start|>(3*4)-1<|im_end|>"));
  EXPECT_EQ(again.to_json(), t.to_json());
  const auto j = nlohmann::json::parse(t.to_json());
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_TRUE(j["model"]["merges"].empty());
  EXPECT_EQ(j["added_tokens"].size(), kSpecials.size());
}

TEST(CharTokenizer, CharacterOutsideCharsetIsAnError) {
  const Tokenizer t = make_char_tokenizer("0123456789+=", {"<eos>"});
  EXPECT_EQ(error_of([&] { t.encode("1+x=2"); }),
            "char tokenizer: no token for 'x' (U+0078) (and the model has no unk_token)");
  EXPECT_EQ(error_of([&] { t.encode("1 2"); }), "char tokenizer: no token for U+0020 (and the model has no unk_token)");
  EXPECT_EQ(error_of([&] { t.encode("3é"); }),
            "char tokenizer: no token for 'é' (U+00E9) (and the model has no unk_token)");
  EXPECT_NE(error_of([&] { t.encode("1\xFF"); }).find("char tokenizer: cannot encode: the text is not valid UTF-8"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { t.decode(std::vector<int32_t>{13}); }),
            "char tokenizer: cannot decode: unknown token id 13 (vocab size 13)");
}

TEST(CharTokenizer, BadArguments) {
  EXPECT_EQ(error_of([] { make_char_tokenizer("ab\xC3\xA9", {}); }),
            "char tokenizer: charset byte 2 (0xC3) is not ASCII");
  EXPECT_EQ(error_of([] { make_char_tokenizer("abca", {}); }), "char tokenizer: charset repeats 'a' (U+0061)");
  EXPECT_EQ(error_of([] { make_char_tokenizer("ab", {""}); }), "char tokenizer: empty special token");
  EXPECT_EQ(error_of([] {
              make_char_tokenizer("ab", {"<s>", "<s>"});
            }),
            "char tokenizer: special token \"<s>\" given twice");
  EXPECT_EQ(error_of([] { make_char_tokenizer("ab", {"a"}); }),
            "char tokenizer: special token \"a\" is also a character of the charset");
  EXPECT_EQ(error_of([] { make_char_tokenizer("ab", {"\xFF"}); }), "char tokenizer: special token is not valid UTF-8");
  // Control characters and an empty charset are fine.
  const Tokenizer t = make_char_tokenizer(std::string("\0\t\x7F", 3), {});
  EXPECT_EQ(t.encode(std::string("\t\0\x7F", 3)), (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(make_char_tokenizer("", {"<s>"}).encode("<s><s>"), (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace mxrl
