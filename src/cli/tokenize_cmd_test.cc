// `mxrl tokenize`, run as a process: JSON lines in, JSON lines out, errors
// naming the line, --help.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include "testing/cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kQwen = MXRL_SHARED_DIR "/data/qwen3-tokenizer";

using test::CmdResult;
using test::slurp;

class TokenizeCmd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mxrl_tokenize_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `mxrl ARGS` with `input` on stdin.
  CmdResult run(const std::string& args, const std::string& input = "") { return test::run_mxrl(dir_, args, input); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(TokenizeCmd, EncodesReferenceLines) {
  const std::string refs = slurp(kQwen + "/encodings.jsonl");
  std::string input;
  std::vector<std::vector<int32_t>> want;
  std::istringstream lines(refs);
  for (std::string line; std::getline(lines, line);) {
    const json j = json::parse(line);
    input += json{{"text", j["text"]}}.dump() + "\n";
    want.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  const CmdResult r = run("tokenize --tokenizer " + kQwen, input);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream out(r.out);
  size_t n = 0;
  for (std::string line; std::getline(out, line); ++n) {
    ASSERT_LT(n, want.size());
    EXPECT_EQ(json::parse(line).at("ids").get<std::vector<int32_t>>(), want[n]) << "line " << n + 1;
  }
  EXPECT_EQ(n, want.size());
}

TEST_F(TokenizeCmd, DecodesAndTakesATokenizerFile) {
  const CmdResult r = run("tokenize --decode --tokenizer " + kQwen + "/tokenizer.json",
                          "{\"ids\": [9707, 11, 1879, 0]}\n{\"ids\": []}\r\n{\"ids\": [151644, 872, 198]}\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "{\"text\":\"Hello, world!\"}\n{\"text\":\"\"}\n{\"text\":\"<|im_start|>user\\n\"}\n");
}

TEST_F(TokenizeCmd, CharTokenizerFile) {
  make_char_tokenizer("0123456789+=", {"<eos>"}).save(path("char.json"));
  const CmdResult r = run("tokenize --tokenizer " + path("char.json"), "{\"text\": \"12+3=15<eos>\"}\n");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "{\"ids\":[1,2,10,3,11,1,5,12]}\n");
}

TEST_F(TokenizeCmd, MalformedLineNamesItsNumber) {
  const std::string good = "{\"text\": \"ok\"}\n";
  struct Bad {
    std::string line, what;
  };
  for (const Bad& b : std::vector<Bad>{{"{\"text\": \"unterminated", "not valid JSON"},
                                       {"[1, 2]", "expected an object with \"text\" (a string)"},
                                       {"{\"txt\": \"x\"}", "expected an object with \"text\" (a string)"},
                                       {"{\"text\": 5}", "expected an object with \"text\" (a string)"},
                                       {"", "not valid JSON"}}) {
    const CmdResult r = run("tokenize --tokenizer " + kQwen, good + good + b.line + "\n" + good);
    EXPECT_EQ(r.rc, 1) << b.line;
    EXPECT_NE(r.err.find("mxrl: error: stdin line 3: " + b.what), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;  // the lines before it
  }
  CmdResult r = run("tokenize --decode --tokenizer " + kQwen, "{\"ids\": [1, -4]}\n");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("stdin line 1: \"ids\"[1]: token id -4 is outside the vocabulary"), std::string::npos) << r.err;
  r = run("tokenize --decode --tokenizer " + kQwen, "{\"ids\": [1]}\n{\"ids\": [999999]}\n");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("stdin line 2: " + kQwen + "/tokenizer.json: cannot decode: unknown token id 999999"),
            std::string::npos)
      << r.err;
  r = run("tokenize --decode --tokenizer " + kQwen, "{\"text\": \"a\"}\n");
  EXPECT_NE(r.err.find("stdin line 1: expected an object with \"ids\""), std::string::npos) << r.err;
}

TEST_F(TokenizeCmd, BadTokenizerAndHelp) {
  std::ofstream(path("bad.json")) << "{\"model\": {\"type\": \"Unigram\"}}";
  CmdResult r = run("tokenize --tokenizer " + path("bad.json"), "{\"text\": \"x\"}\n");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(path("bad.json") + ": model.type: unsupported model \"Unigram\""), std::string::npos) << r.err;
  r = run("tokenize --tokenizer " + path("missing"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = run("tokenize");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--tokenizer is required"), std::string::npos) << r.err;
  r = run("tokenize --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--decode"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--tokenizer"), std::string::npos) << r.out;
  r = run("--help");
  EXPECT_NE(r.out.find("tokenize"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mxrl
