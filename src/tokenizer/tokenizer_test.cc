// The Qwen3 tokenizer against reference encodings, round trips through
// to_json / save / load, and encode / decode edge cases.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <utf8proc.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "util/error.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kQwenDir = MXRL_SHARED_DIR "/data/qwen3-tokenizer";

const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(kQwenDir);
  return t;
}

struct Reference {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Reference> references() {
  std::ifstream f(kQwenDir + "/encodings.jsonl");
  EXPECT_TRUE(f.good()) << kQwenDir << "/encodings.jsonl";
  std::vector<Reference> out;
  std::string line;
  while (std::getline(f, line)) {
    const json j = json::parse(line);
    out.push_back({j.at("text").get<std::string>(), j.at("ids").get<std::vector<int32_t>>()});
  }
  return out;
}

// Text that exercises the pre-tokenizer regex, NFC and the added tokens.
std::string random_text(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> atoms = {"a",
                                                 "Z",
                                                 "é",
                                                 "e\xCC\x81",
                                                 "ß",
                                                 "日",
                                                 "本",
                                                 "😀",
                                                 " ",
                                                 "  ",
                                                 "\t",
                                                 "\n",
                                                 "\r\n",
                                                 "1",
                                                 "23",
                                                 "'s",
                                                 "'LL",
                                                 "!",
                                                 "?",
                                                 ".",
                                                 "-",
                                                 "_",
                                                 "<|im_start|>",
                                                 "<|im_end|>",
                                                 "<think>",
                                                 "\xC2\xA0",
                                                 "\xE2\x80\x8B",
                                                 "Ω",
                                                 "\xD9\xA3",
                                                 "the",
                                                 "The",
                                                 " of",
                                                 "ing",
                                                 "\xEF\xBB\xBF"};
  std::string s;
  for (size_t i = 0; i < n; ++i) s += atoms[rng() % atoms.size()];
  return s;
}

TEST(Qwen3, MatchesReferenceEncodings) {
  const auto refs = references();
  ASSERT_GE(refs.size(), 100u);
  size_t matched = 0;
  for (const Reference& r : refs) {
    EXPECT_EQ(qwen().encode(r.text), r.ids) << json(r.text).dump();
    if (qwen().encode(r.text) == r.ids) ++matched;
  }
  EXPECT_EQ(matched, refs.size());
  std::printf("matched %zu of %zu reference encodings\n", matched, refs.size());
}

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  std::string r(reinterpret_cast<const char*>(out));
  std::free(out);
  return r;
}

TEST(Qwen3, DecodesReferenceIds) {
  // The text comes back in NFC (the normalizer's form): exactly the text for
  // every line already in NFC.
  size_t exact = 0;
  for (const Reference& r : references()) {
    const std::string back = qwen().decode(r.ids);
    EXPECT_EQ(back, nfc(r.text)) << json(r.text).dump();
    exact += back == r.text;
    if (r.text == nfc(r.text)) {
      EXPECT_EQ(back, r.text);
    }
  }
  std::printf("%zu lines decode to exactly their text, the others to its NFC form\n", exact);
}

TEST(Qwen3, VocabAndAddedTokens) {
  EXPECT_EQ(qwen().vocab_size(), 151669);
  EXPECT_EQ(qwen().token_id("<|endoftext|>"), 151643);
  EXPECT_EQ(qwen().token_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen().token_id("<|im_end|>"), 151645);
  EXPECT_EQ(qwen().token_id("</think>"), 151668);
  EXPECT_EQ(qwen().token_id("!"), 0);
  EXPECT_EQ(qwen().token_id("Ġthe"), 279);
  EXPECT_EQ(qwen().token_id("no such token, surely"), std::nullopt);
  EXPECT_EQ(qwen().decode(std::vector<int32_t>{151644, 872, 198}), "<|im_start|>user\n");
}

TEST(Qwen3, NormalizesToNfc) {
  // "e" + combining acute encodes as the precomposed "é".
  EXPECT_EQ(qwen().encode("caf"
                          "e\xCC\x81"),
            qwen().encode("café"));
  EXPECT_EQ(qwen().decode(qwen().encode("caf"
                                        "e\xCC\x81")),
            "café");
}

TEST(Qwen3, RoundTripsRandomText) {
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_text(rng, 1 + rng() % 40);
    const auto ids = qwen().encode(s);
    for (int32_t id : ids) ASSERT_LT(id, qwen().vocab_size());
    // decode(encode(s)) is s in NFC; encoding that again gives the same ids.
    const std::string back = qwen().decode(ids);
    EXPECT_EQ(qwen().encode(back), ids) << json(s).dump();
    if (s.find("e\xCC\x81") == std::string::npos) {
      EXPECT_EQ(back, s) << json(s).dump();
    }
  }
}

TEST(Qwen3, LongInputs) {
  // Long runs stress the regex (lookahead over long white space) and the merge queue.
  for (const std::string& s : {std::string(100000, ' ') + "x", std::string(100000, 'a'), std::string(50000, '\n'),
                               std::string(30000, '7'), std::string(20000, '!') + " \t\n"}) {
    const auto ids = qwen().encode(s);
    EXPECT_EQ(qwen().decode(ids), s);
  }
}

TEST(Qwen3, DecodeCutCharacterGivesReplacement) {
  // "熣" (three bytes) is two tokens; the first alone is a cut character.
  const auto ids = qwen().encode("熣");
  ASSERT_GT(ids.size(), 1u);
  EXPECT_EQ(qwen().decode(std::vector<int32_t>{ids[0]}), "\xEF\xBF\xBD");
  EXPECT_EQ(qwen().decode(ids), "熣");
}

TEST(Qwen3, RejectsInvalidUtf8AndUnknownIds) {
  for (const std::string& bad : {std::string("abc\xFF"), std::string("\xC3"), std::string("\xED\xA0\x80"),
                                 std::string("x\xC0\xAFy"), std::string("\xF4\x90\x80\x80")}) {
    try {
      qwen().encode(bad);
      ADD_FAILURE() << "accepted " << json(bad).dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(qwen().encode(std::string("a\0b", 3)).size(), 3u);  // NUL is valid UTF-8
  for (int32_t id : {-1, 151669, 1 << 30}) {
    try {
      qwen().decode(std::vector<int32_t>{5, id});
      ADD_FAILURE() << "decoded id " << id;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unknown token id " + std::to_string(id)), std::string::npos) << e.what();
    }
  }
}

TEST(Qwen3, ToJsonRoundTrip) {
  const std::string text = qwen().to_json();
  const Tokenizer again = Tokenizer::from_json(text, "qwen copy");
  EXPECT_EQ(again.vocab_size(), qwen().vocab_size());
  for (const Reference& r : references()) EXPECT_EQ(again.encode(r.text), r.ids);
  std::mt19937 rng(11);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_text(rng, 30);
    EXPECT_EQ(again.encode(s), qwen().encode(s));
  }
  EXPECT_EQ(again.to_json(), text);  // to_json is a fixed point
}

TEST(Qwen3, SaveAndLoad) {
  const fs::path dir = fs::temp_directory_path() / ("mxrl_tok_save_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  qwen().save(dir.string());  // a directory: dir/tokenizer.json
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json"));
  const Tokenizer a = Tokenizer::load(dir.string());
  EXPECT_EQ(a.label(), (dir / "tokenizer.json").string());
  qwen().save((dir / "other.json").string());
  const Tokenizer b = Tokenizer::load((dir / "other.json").string());
  for (const Reference& r : references()) {
    EXPECT_EQ(a.encode(r.text), r.ids);
    EXPECT_EQ(b.encode(r.text), r.ids);
  }
  for (const auto& e : fs::directory_iterator(dir))  // no temporary files left
    EXPECT_TRUE(e.path().filename() == "tokenizer.json" || e.path().filename() == "other.json") << e.path();
  fs::remove_all(dir);
}

TEST(Qwen3, LoadErrorsNameThePath) {
  try {
    Tokenizer::load("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/tokenizer.json: cannot open"), std::string::npos)
        << e.what();
  }
  // A directory without tokenizer.json.
  try {
    Tokenizer::load(fs::temp_directory_path().string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: cannot open"), std::string::npos) << e.what();
  }
}

TEST(Qwen3, ConcurrentEncodeAgrees) {
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(rng, 20));
  std::vector<std::vector<int32_t>> expect;
  for (const auto& t : texts) expect.push_back(qwen().encode(t));
  const Tokenizer fresh = Tokenizer::from_json(qwen().to_json(), "fresh");  // empty cache
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < texts.size(); ++i) {
        const size_t j = (i * 7 + k * 13) % texts.size();
        if (fresh.encode(texts[j]) != expect[j]) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace mxrl
