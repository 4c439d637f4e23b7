// `mxrl generate`, run as a process on a tiny checkpoint from `mxrl init`:
// well-formed, complete, ordered output; samples reproducible per prompt
// whatever else is in the file and whatever the thread count; log-probs equal
// to `mxrl score`'s, as printed; one-line errors that leave no output.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include "testing/cli.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::CmdResult;
using test::slurp;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) v.push_back(line);
  return v;
}

// The text of a line's "logprobs" array, exactly as printed.
std::string raw_logprobs(const std::string& line) {
  const std::string key = "\"logprobs\": [";
  const size_t b = line.find(key);
  if (b == std::string::npos) return "<none>";
  const size_t e = line.find(']', b + key.size());
  return line.substr(b + key.size(), e - b - key.size());
}

class GenerateCmd : public ::testing::Test {
 protected:
  // One tiny checkpoint for the whole suite.
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("mxrl_generate_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    for (const char* preset : {"tiny-dense", "tiny-moe"}) {
      const std::string cmd = fmt::format("{} init --preset {} --out {} --init-std 0.1 2>/dev/null", MXRL_BIN, preset,
                                          (root_ / preset).string());
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  void SetUp() override {
    dir_ = root_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
    model_ = (root_ / "tiny-dense").string();
  }

  CmdResult run(const std::string& args) { return test::run_mxrl(dir_, args); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  // Generates from `prompts` (file contents) into `out`; returns the output lines.
  std::vector<std::string> generate(const std::string& prompts, const std::string& flags,
                                    const std::string& out = "out.jsonl") {
    const std::string in = write("prompts_" + out, prompts);
    const CmdResult r = run(fmt::format("generate --model {} --prompts {} --out {} {}", model_, in, path(out), flags));
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // just the summary
    return lines_of(slurp(path(out)));
  }

  static inline fs::path root_;
  fs::path dir_;
  std::string model_;
};

// The config's eos_token_id.
int32_t eos_of(const std::string& model) {
  return json::parse(slurp(fs::path(model) / "config.json")).at("eos_token_id").get<int32_t>();
}

std::string prompt_line(const std::string& text) { return json{{"prompt", text}}.dump() + "\n"; }
std::string tokens_line(const std::vector<int32_t>& ids) { return json{{"tokens", ids}}.dump() + "\n"; }

TEST_F(GenerateCmd, OutputIsWellFormedCompleteAndOrdered) {
  const Tokenizer tk = Tokenizer::load(model_);
  // The default stop (the config's eos_token_id: <|endoftext|> for `mxrl init`), and many extra stop ids so
  // that both finish reasons occur.
  std::set<int32_t> stop = {eos_of(model_)};
  std::string stop_flags;
  for (int32_t id = 10; id < 20; ++id) stop.insert(id), stop_flags += fmt::format(" --stop {}", id);
  const std::string prompts =
      prompt_line("What is 12+7?") + "\n" + tokens_line({3, 1, 4, 1, 5}) + "  \n" + prompt_line("The quick brown fox");
  const int64_t n = 5, max_new = 8;
  const auto lines = generate(prompts, fmt::format("--plan mxfp8 --n {} --max-new-tokens {} --temperature 1 --seed 3 "
                                                   "--threads 2{}",
                                                   n, max_new, stop_flags));
  ASSERT_EQ(lines.size(), size_t(3 * n));
  std::set<std::string> reasons;
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const json j = json::parse(lines[i]);
    EXPECT_EQ(j.size(), 7u);
    EXPECT_EQ(j.at("prompt_index").get<int64_t>(), int64_t(i) / n);
    EXPECT_EQ(j.at("sample_index").get<int64_t>(), int64_t(i) % n);
    EXPECT_EQ(j.at("version").get<int64_t>(), 0);
    const auto tokens = j.at("tokens").get<std::vector<int32_t>>();
    const auto logprobs = j.at("logprobs").get<std::vector<double>>();
    ASSERT_GE(tokens.size(), 1u);
    ASSERT_LE(tokens.size(), size_t(max_new));
    EXPECT_EQ(logprobs.size(), tokens.size());
    for (double lp : logprobs) EXPECT_LE(lp, 0.0);
    for (size_t t = 0; t + 1 < tokens.size(); ++t) EXPECT_EQ(stop.count(tokens[t]), 0u) << "a stop token mid-sample";
    const std::string reason = j.at("finish_reason").get<std::string>();
    reasons.insert(reason);
    if (reason == "stop") {
      EXPECT_EQ(stop.count(tokens.back()), 1u);
    } else {
      EXPECT_EQ(reason, "length");
      EXPECT_EQ(stop.count(tokens.back()), 0u);
      EXPECT_EQ(tokens.size(), size_t(max_new));
    }
    EXPECT_EQ(j.at("text").get<std::string>(), tk.decode(tokens));
  }
  EXPECT_EQ(reasons, (std::set<std::string>{"stop", "length"}));
}

// One stop-token default everywhere (sampler/prompts.h): by default generate
// stops where an RL rollout stops, on the model's EOS only, so its samples
// are the rollout's (a rollout's requests stop on {eos}: what --no-default-stop
// --stop EOS asks for). Before, generate also stopped on <|im_end|>.
TEST_F(GenerateCmd, DefaultStopIsTheEosRlRolloutsStopOn) {
  const Tokenizer tk = Tokenizer::load(model_);
  const int32_t eos = eos_of(model_), im_end = *tk.token_id("<|im_end|>");
  ASSERT_NE(eos, im_end);
  const std::string prompts =
      prompt_line("<|im_start|>12+7=") + prompt_line("The quick brown fox") + tokens_line({3, 1, 4, 1, 5});
  const std::string flags = "--plan mxfp8 --n 16 --max-new-tokens 48 --temperature 1 --seed 7";
  const auto by_default = generate(prompts, flags, "default.jsonl");
  const auto rollout = generate(prompts, fmt::format("{} --no-default-stop --stop {}", flags, eos), "rollout.jsonl");
  EXPECT_EQ(by_default, rollout);
  // The case the default decides: a rollout's sample that goes on past <|im_end|>.
  int im_end_inside = 0;
  for (const auto& line : rollout) {
    const auto tokens = json::parse(line).at("tokens").get<std::vector<int32_t>>();
    for (size_t t = 0; t + 1 < tokens.size(); ++t) im_end_inside += tokens[t] == im_end;
  }
  EXPECT_GT(im_end_inside, 0) << "no sample here tells the two defaults apart";
  // --help states the default.
  const CmdResult help = run("generate --help");
  EXPECT_NE(help.out.find("the one RL and SFT rollouts stop on"), std::string::npos) << help.out;
}

TEST_F(GenerateCmd, SamplesDependOnlyOnThePromptItsIndexAndTheSeed) {
  const std::string p = prompt_line("Once upon a time"), q = tokens_line({7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}),
                    r = prompt_line("x");
  const std::string flags = "--plan mxfp8 --n 3 --max-new-tokens 12 --temperature 0.8 --top-p 0.95 --seed 11";
  const auto alone = generate(p, flags + " --threads 1", "alone.jsonl");
  const auto mixed = generate(p + q + r, flags + " --threads 2", "mixed.jsonl");
  ASSERT_EQ(alone.size(), 3u);
  ASSERT_EQ(mixed.size(), 9u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(alone[i], mixed[i]);
  // At line index 1 (blank lines do not count), beside different neighbours.
  const auto a = generate(r + "\n" + p + q, flags + " --threads 2", "a.jsonl");
  const auto b = generate("\n" + q + "\n\n" + p, flags + " --threads 1", "b.jsonl");
  ASSERT_EQ(a.size(), 9u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 3; i < 6; ++i) EXPECT_EQ(a[i], b[i]);
  // The whole output is the same with 1 and 2 threads.
  EXPECT_EQ(generate(p + q + r, flags + " --threads 1", "mixed1.jsonl"), mixed);
  // Another seed gives other samples.
  EXPECT_NE(generate(p, "--plan mxfp8 --n 3 --max-new-tokens 12 --temperature 0.8 --top-p 0.95 --seed 12", "s.jsonl"),
            alone);
}

TEST_F(GenerateCmd, LogprobsEqualScore) {
  const Tokenizer tk = Tokenizer::load(model_);
  const std::vector<std::string> texts = {"Hi", "A longer prompt, with punctuation: (1+2)*3 = 9!", "q"};
  std::vector<std::vector<int32_t>> prompt_tokens;
  std::string prompts;
  for (const auto& t : texts) prompts += prompt_line(t), prompt_tokens.push_back(tk.encode(t));
  prompt_tokens.push_back({40, 41, 42, 43, 44, 45, 46});
  prompts += tokens_line(prompt_tokens.back());
  for (const char* preset : {"tiny-dense", "tiny-moe"})
    for (const char* plan : {"fp32", "bf16", "mxfp8", "mxfp8-half"}) {
      if (std::string(preset) == "tiny-moe" && std::string(plan) != "mxfp8") continue;
      SCOPED_TRACE(fmt::format("{} {}", preset, plan));
      model_ = (root_ / preset).string();
      // top-p / top-k shape the draw, not the log-prob (temperature 1).
      const auto lines = generate(prompts, fmt::format("--plan {} --n 3 --max-new-tokens 10 --temperature 1 "
                                                       "--top-p 0.9 --top-k 20 --seed 5 --no-default-stop",
                                                       plan));
      ASSERT_EQ(lines.size(), prompt_tokens.size() * 3);
      std::string score_in;
      for (const auto& line : lines) {
        const json j = json::parse(line);
        std::vector<int32_t> seq = prompt_tokens[j.at("prompt_index").get<size_t>()];
        const size_t prompt_len = seq.size();
        for (int32_t t : j.at("tokens").get<std::vector<int32_t>>()) seq.push_back(t);
        score_in += json{{"tokens", seq}, {"prompt_len", prompt_len}}.dump() + "\n";
      }
      const CmdResult r = run(fmt::format("score --model {} --plan {} --in {} --out {} --threads 2", model_, plan,
                                          write("score_in.jsonl", score_in), path("score_out.jsonl")));
      ASSERT_EQ(r.rc, 0) << r.err;
      const auto scored = lines_of(slurp(path("score_out.jsonl")));
      ASSERT_EQ(scored.size(), lines.size());
      for (size_t i = 0; i < lines.size(); ++i) {
        ASSERT_NE(raw_logprobs(lines[i]).find_first_of("0123456789"), std::string::npos) << lines[i];
        EXPECT_EQ(raw_logprobs(lines[i]), raw_logprobs(scored[i])) << i;
      }
    }
}

TEST_F(GenerateCmd, PromptAtTheLengthLimitGetsOneToken) {
  const auto lines = generate(tokens_line(std::vector<int32_t>(1023, 5)), "--n 2 --max-new-tokens 8 --plan bf16");
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    const json j = json::parse(line);
    EXPECT_EQ(j.at("tokens").size(), 1u) << line;
    const std::string reason = j.at("finish_reason").get<std::string>();
    EXPECT_TRUE(reason == "length" || reason == "stop") << line;
  }
}

TEST_F(GenerateCmd, WithoutATokenizerTokensOnly) {
  const fs::path bare = dir_ / "bare";
  fs::copy(model_, bare);
  fs::remove(bare / "tokenizer.json");
  const std::string in = write("p.jsonl", tokens_line({1, 2, 3}));
  CmdResult r = run(fmt::format("generate --model {} --prompts {} --out {} --n 2 --max-new-tokens 4", bare.string(), in,
                                path("out.jsonl")));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto lines = lines_of(slurp(path("out.jsonl")));
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) EXPECT_FALSE(json::parse(line).contains("text")) << line;
  write("q.jsonl", tokens_line({1, 2, 3}) + prompt_line("abc"));
  r = run(
      fmt::format("generate --model {} --prompts {} --out {}", bare.string(), path("q.jsonl"), path("q_out.jsonl")));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find(path("q.jsonl") + ":2: a {\"prompt\": ...} line needs a tokenizer"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(fs::exists(path("q_out.jsonl")));
}

TEST_F(GenerateCmd, ErrorsAreOneLineNonZeroAndLeaveNoOutput) {
  const std::string good = prompt_line("ok");
  const std::string in = write("good.jsonl", good), out = path("out.jsonl");
  const std::string base = fmt::format("generate --model {} --out {} ", model_, out);
  struct Case {
    std::string args;
    int rc;  // -1: any non-zero
    std::string phrase;
  };
  std::vector<Case> cases = {
      {base + "--prompts " + in + " --temperature -1", 2, "--temperature: must be >= 0 (0 is greedy), got -1"},
      {base + "--prompts " + in + " --temperature nan", -1, "temperature"},
      {base + "--prompts " + in + " --top-p 0", 2, "--top-p"},
      {base + "--prompts " + in + " --top-p 1.5", 2, "--top-p: must be in (0, 1], got 1.5"},
      {base + "--prompts " + in + " --top-k -1", 2, "--top-k"},
      {base + "--prompts " + in + " --n 0", 2, "--n: must be >= 1, got 0"},
      {base + "--prompts " + in + " --max-new-tokens 0", 2, "--max-new-tokens"},
      {base + "--prompts " + in + " --kv-budget 0", 2, "--kv-budget"},
      {base + "--prompts " + in + " --stop -3", 2, "--stop"},
      {base + "--prompts " + in + " --stop 5000", 1, "--stop 5000: unknown token id"},
      {base + "--prompts " + in + " --plan bogus", 1, "bogus"},
      {base + "--prompts " + path("missing.jsonl"), 2, "missing.jsonl"},
      {fmt::format("generate --model {} --prompts {} --out {}", model_, in, in + "/out.jsonl"), 1,
       "cannot create the folder"},  // its parent is a file (a missing one is made)
  };
  // Bad prompt files: the error names file:line (line 3, after a blank line).
  struct BadLine {
    std::string line, phrase;
  };
  const std::vector<BadLine> bad = {
      {prompt_line(""), "empty prompt"},
      {tokens_line({}), "empty prompt"},
      {tokens_line(std::vector<int32_t>(1024, 5)), "prompt of 1024 tokens is too long"},
      {prompt_line(std::string(1100, 'a')), "prompt of 1100 tokens is too long"},
      {tokens_line({1, 5000}), "\"tokens\"[1]: token id 5000 is outside the vocabulary"},
      {"{\"tokens\": [1, -1]}\n", "\"tokens\"[1]: token id -1 is outside the vocabulary"},
      {"{\"tokens\": [1.5]}\n", "\"tokens\"[0]: 1.5 is not a token id"},
      {"{\"tokens\": [1, 4294967301]}\n", "\"tokens\"[1]: token id 4294967301 is outside"},
      {"{\"tokens\": [true]}\n", "\"tokens\"[0]: true is not a token id"},
      {"{\"tokens\": \"abc\"}\n", "\"tokens\": expected an array of token ids"},
      {"{\"prompt\": 5}\n", "\"prompt\" must be a string"},
      {"not json\n", "not valid JSON"},
      {"[1, 2]\n", "expected {\"prompt\": \"text\"} or {\"tokens\": [ids...]}"},
      {"{\"text\": \"a\"}\n", "expected {\"prompt\": \"text\"} or {\"tokens\": [ids...]}"},
      {"{\"prompt\": \"a\", \"tokens\": [1]}\n", "expected {\"prompt\": \"text\"} or {\"tokens\": [ids...]}"},
      {prompt_line("caf\u00e9"), ""},  // a character the tokenizer has no token for
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const std::string f = write(fmt::format("bad{}.jsonl", i), good + "\n" + bad[i].line + good);
    cases.push_back({base + "--prompts " + f, 1, fmt::format("{}:3: {}", f, bad[i].phrase)});
  }
  const std::string ten = write("ten.jsonl", good + tokens_line(std::vector<int32_t>(10, 3)));
  cases.push_back({base + "--prompts " + ten + " --max-new-tokens 4 --kv-budget 12", 1,
                   ten + ":2: a sample of this prompt (10 tokens) with --max-new-tokens 4 needs 14 KV cache positions, "
                         "more than --kv-budget 12"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CmdResult r = run(c.args);
    if (c.rc < 0)
      EXPECT_NE(r.rc, 0) << r.err;
    else
      EXPECT_EQ(r.rc, c.rc) << r.err;
    EXPECT_NE(r.err.find(c.phrase), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  // A failed run never replaces an existing output.
  std::ofstream(out) << "keep";
  EXPECT_EQ(run(base + "--prompts " + write("e.jsonl", prompt_line(""))).rc, 1);
  EXPECT_EQ(slurp(out), "keep");
}

}  // namespace
}  // namespace mxrl
