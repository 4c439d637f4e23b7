#include "tasks/dataset.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tasks/random.h"
#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {

namespace fs = std::filesystem;

std::string line(const std::string& prompt, const std::string& answer) {
  return nlohmann::json{{"prompt", prompt}, {"answer", answer}}.dump() + "\n";
}

// A fresh directory per test, removed at the end.
class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("rl_dataset_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  fs::path dir_;
};

std::string parse_error(const std::string& text) {
  return test::error_of([&] { JsonlTask::parse(text, "data.jsonl"); });
}

// Prompts "<stem>0", "<stem>1", ... whose split by hash is `split`.
std::vector<std::string> prompts_in(Split split, size_t n, const std::string& stem = "q") {
  std::vector<std::string> out;
  for (int i = 0; out.size() < n; ++i) {
    const std::string p = stem + std::to_string(i);
    if (split_of(p) == split) out.push_back(p);
  }
  return out;
}

TEST_F(DatasetTest, LoadsItemsInFileOrder) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += line(fmt::format("q{}", i), fmt::format("a{}", i));
  // Extra fields, blank lines, whitespace-only lines and CRLF are fine.
  text += "\n   \n\t\r\n";
  text += R"({"id": 7, "prompt": "extra", "answer": "fields", "meta": {"x": [1, 2]}})"
          "\r\n";
  const std::string path = write("data.jsonl", text);
  const auto task = load_jsonl_task(path);
  EXPECT_EQ(task->name(), "jsonl:" + path);
  const auto& t = dynamic_cast<const JsonlTask&>(*task);
  EXPECT_FALSE(t.used_fallback());
  std::vector<std::string> want_train, want_eval;
  for (int i = 0; i < 100; ++i) {
    const std::string p = fmt::format("q{}", i);
    (is_eval_prompt(p) ? want_eval : want_train).push_back(p);
  }
  (is_eval_prompt("extra") ? want_eval : want_train).push_back("extra");
  for (Split split : {Split::Train, Split::Eval}) {
    std::vector<std::string> got;
    for (const Problem& p : t.items(split)) {
      got.push_back(p.prompt);
      EXPECT_EQ(p.answer, p.prompt == "extra" ? "fields" : "a" + p.prompt.substr(1));
    }
    EXPECT_EQ(got, split == Split::Train ? want_train : want_eval);
  }
  // ~10% in Eval (the same hash as the built-in tasks).
  EXPECT_GE(want_eval.size(), 3u);
  EXPECT_LE(want_eval.size(), 20u);
  // make_task reaches it too.
  EXPECT_EQ(make_task("jsonl:" + path)->name(), "jsonl:" + path);
  EXPECT_EQ(make_task("jsonl:" + path)->generate(Split::Eval, 1, 2).prompt, task->generate(Split::Eval, 1, 2).prompt);
}

TEST_F(DatasetTest, ErrorsNameFileAndLine) {
  const std::string ok = line("p", "a") + line("p2", "b");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {ok + "\n\n" + ok + R"({"prompt": "x"})", "data.jsonl:7: missing \"answer\""},
      {R"({"answer": "x"})", "data.jsonl:1: missing \"prompt\""},
      {ok + R"({"prompt": "x", "answer": )", "data.jsonl:3: not valid JSON: "},
      {ok + "{\"prompt\": \"x\", \"answer\": \"y\"} trailing\n", "data.jsonl:3: not valid JSON: "},
      {"{\"prompt\": \"x\", \"answer\": \"y\"\n}\n", "data.jsonl:1: not valid JSON: "},
      {"{\"prompt\": \"\xff\", \"answer\": \"y\"}\n", "data.jsonl:1: not valid JSON: "},
      {"not json\n", "data.jsonl:1: not valid JSON: "},
      {ok + "[1, 2]\n", "data.jsonl:3: not a JSON object (array)"},
      {"\"text\"\n", "data.jsonl:1: not a JSON object (string)"},
      {"null\n", "data.jsonl:1: not a JSON object (null)"},
      {R"({"prompt": 5, "answer": "x"})", "data.jsonl:1: \"prompt\" is not a string (number)"},
      {ok + R"({"prompt": "x", "answer": null})", "data.jsonl:3: \"answer\" is not a string (null)"},
      {ok + R"({"prompt": "x", "answer": ["y"]})", "data.jsonl:3: \"answer\" is not a string (array)"},
      {"", "data.jsonl: empty file (no items)"},
      {"\n \n\r\n\t\n", "data.jsonl: empty file (no items)"},
      {line("p", "a"), "data.jsonl: only 1 item; a dataset needs at least 2"},
      {line("p", "a") + line("p", "b") + line("p", "c"),
       "data.jsonl: every item has the same prompt, so it cannot be split into Train and Eval"},
  };
  for (const auto& [text, want] : cases) {
    const std::string msg = parse_error(text);
    EXPECT_TRUE(msg.starts_with(want)) << "want \"" << want << "\", got \"" << msg << "\"";
  }
  // nlohmann's exception prefix is dropped.
  EXPECT_EQ(parse_error("not json\n").find("[json.exception"), std::string::npos);
}

TEST_F(DatasetTest, FileErrors) {
  const std::string missing = (dir_ / "missing.jsonl").string();
  try {
    load_jsonl_task(missing);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), missing + ": cannot read: No such file or directory");
  }
  try {
    load_jsonl_task(dir_.string());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with(dir_.string() + ": cannot read: ")) << e.what();
  }
  const std::string empty = write("empty.jsonl", "");
  try {
    load_jsonl_task(empty);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), empty + ": empty file (no items)");
  }
  const std::string bad = write("bad.jsonl", line("a", "b") + "\n{\"prompt\": \"c\"}\n");
  try {
    load_jsonl_task(bad);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), bad + ":3: missing \"answer\"");
  }
  EXPECT_THROW(make_task("jsonl:" + missing), Error);
}

// A line longer than the model's positions allow is refused while reading,
// naming the file and line, without reading the rest of it.
TEST_F(DatasetTest, ALineLongerThanTheModelAllowsIsRefusedWhileReading) {
  const int64_t limit = jsonl_line_limit(128);
  EXPECT_EQ(limit, 128 * 128 + 4096);
  const std::string ok = line("a", "b") + line(std::string(limit - 40, 'x'), "y") + line("c", "d");
  const std::string path_ok = write("ok.jsonl", ok);
  EXPECT_EQ(load_jsonl_task(path_ok, limit)->name(), "jsonl:" + path_ok);
  // Line 3 (lines count from 1, the empty one too) is far longer; so is line 2 of the next, in the same buffer.
  for (const auto& [text, bad_line] :
       {std::pair<std::string, int>{line("a", "b") + "\n" + line(std::string(8 << 20, 'x'), "y") + line("c", "d"), 3},
        std::pair<std::string, int>{line("a", "b") + line(std::string(limit, 'x'), "y") + line("c", "d"), 2}}) {
    const std::string p = write("long.jsonl", text);
    const std::string want =
        fmt::format("{}:{}: line longer than {} bytes, more than the model's positions allow", p, bad_line, limit);
    try {
      load_jsonl_task(p, limit);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
    try {
      make_task("jsonl:" + p, 128);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
    try {
      JsonlTask::parse(text, p, limit);
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), want);
    }
  }
  // Without a model, no bound.
  EXPECT_NO_THROW(load_jsonl_task(write("long.jsonl", line("a", "b") + line(std::string(limit, 'x'), "y"))));
}

TEST_F(DatasetTest, EachItemOncePerEpoch) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += line("item " + std::to_string(i), std::to_string(i));
  const auto t = JsonlTask::parse(text, "data.jsonl");
  for (Split split : {Split::Train, Split::Eval}) {
    const auto& items = t->items(split);
    const uint64_t n = items.size();
    ASSERT_GT(n, 5u);
    std::multiset<std::string> want;
    for (const Problem& p : items) want.insert(p.prompt);
    std::vector<std::vector<std::string>> orders;
    for (uint64_t seed : {1, 2})
      for (uint64_t epoch = 0; epoch < 4; ++epoch) {
        std::vector<std::string> order;
        for (uint64_t i = epoch * n; i < (epoch + 1) * n; ++i) {
          const Problem p = t->generate(split, seed, i);
          EXPECT_EQ(p.answer, p.prompt.substr(5));
          order.push_back(p.prompt);
        }
        EXPECT_EQ(std::multiset<std::string>(order.begin(), order.end()), want)
            << split_name(split) << " seed " << seed << " epoch " << epoch;
        orders.push_back(order);
      }
    // Every epoch and seed has its own order, and it is not file order.
    std::vector<std::string> file_order;
    for (const Problem& p : items) file_order.push_back(p.prompt);
    for (size_t a = 0; a < orders.size(); ++a) {
      EXPECT_NE(orders[a], file_order);
      for (size_t b = a + 1; b < orders.size(); ++b) EXPECT_NE(orders[a], orders[b]) << a << " " << b;
    }
    // Deterministic: another instance gives the same problems.
    const auto again = JsonlTask::parse(text, "data.jsonl");
    for (uint64_t i = 0; i < 3 * n; i += 7)
      EXPECT_EQ(again->generate(split, 5, i).prompt, t->generate(split, 5, i).prompt);
  }
}

TEST_F(DatasetTest, ItemsWithDuplicatePromptsStayInOneSplit) {
  std::string text;
  for (int i = 0; i < 60; ++i) text += line("dup " + std::to_string(i % 20), std::to_string(i));
  const auto t = JsonlTask::parse(text, "d");
  std::set<std::string> train, eval;
  for (const Problem& p : t->items(Split::Train)) train.insert(p.prompt);
  for (const Problem& p : t->items(Split::Eval)) eval.insert(p.prompt);
  for (const std::string& p : eval) EXPECT_EQ(train.count(p), 0u) << p;
  EXPECT_EQ(t->items(Split::Train).size() + t->items(Split::Eval).size(), 60u);
}

TEST_F(DatasetTest, FallbackWhenASplitIsEmpty) {
  // All prompts hash to Train: the last item goes to Eval.
  const std::vector<std::string> train_only = prompts_in(Split::Train, 5);
  std::string text;
  for (const std::string& p : train_only) text += line(p, "ans " + p);
  auto t = JsonlTask::parse(text, "d");
  EXPECT_TRUE(t->used_fallback());
  ASSERT_EQ(t->items(Split::Eval).size(), 1u);
  EXPECT_EQ(t->items(Split::Eval)[0].prompt, train_only.back());
  EXPECT_EQ(t->items(Split::Eval)[0].answer, "ans " + train_only.back());
  ASSERT_EQ(t->items(Split::Train).size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(t->items(Split::Train)[i].prompt, train_only[i]);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(t->generate(Split::Eval, 0, i).prompt, train_only.back());

  // All prompts hash to Eval: the same rule.
  const std::vector<std::string> eval_only = prompts_in(Split::Eval, 3);
  text.clear();
  for (const std::string& p : eval_only) text += line(p, "x");
  t = JsonlTask::parse(text, "d");
  EXPECT_TRUE(t->used_fallback());
  ASSERT_EQ(t->items(Split::Eval).size(), 1u);
  EXPECT_EQ(t->items(Split::Eval)[0].prompt, eval_only.back());
  ASSERT_EQ(t->items(Split::Train).size(), 2u);
  EXPECT_EQ(t->items(Split::Train)[0].prompt, eval_only[0]);
  EXPECT_EQ(t->items(Split::Train)[1].prompt, eval_only[1]);

  // The last item's duplicates go with it.
  text = line(train_only[0], "1") + line(train_only[1], "2") + line(train_only[0], "3");
  t = JsonlTask::parse(text, "d");
  ASSERT_EQ(t->items(Split::Eval).size(), 2u);
  EXPECT_EQ(t->items(Split::Eval)[0].answer, "1");
  EXPECT_EQ(t->items(Split::Eval)[1].answer, "3");
  ASSERT_EQ(t->items(Split::Train).size(), 1u);
  EXPECT_EQ(t->items(Split::Train)[0].prompt, train_only[1]);

  // Two items, one per split by hash: no fallback.
  text = line(train_only[0], "a") + line(eval_only[0], "b");
  t = JsonlTask::parse(text, "d");
  EXPECT_FALSE(t->used_fallback());
  EXPECT_EQ(t->items(Split::Train)[0].prompt, train_only[0]);
  EXPECT_EQ(t->items(Split::Eval)[0].prompt, eval_only[0]);
}

TEST_F(DatasetTest, VerifyIsExactMatch) {
  const auto t = JsonlTask::parse(line("q: 2+2?", "4") + line("q: name?", "Ada Lovelace"), "d");
  const Problem p{"q: name?", "Ada Lovelace"};
  EXPECT_TRUE(t->verify(p, "Ada Lovelace"));
  EXPECT_TRUE(t->verify(p, "  Ada Lovelace\n"));
  EXPECT_FALSE(t->verify(p, "Ada  Lovelace"));
  EXPECT_FALSE(t->verify(p, "ada lovelace"));
  EXPECT_FALSE(t->verify(p, "Ada Lovelace."));
  EXPECT_FALSE(t->verify(p, ""));
}

TEST(Permute, IsABijection) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 255, 256, 257, 1000, 4097}) {
    for (uint64_t key : {0ull, 1ull, 0xDEADBEEFull}) {
      std::vector<bool> seen(n, false);
      size_t fixed = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t j = detail::permute(i, n, key);
        ASSERT_LT(j, n);
        EXPECT_FALSE(seen[j]) << n << " " << key << " " << i;
        seen[j] = true;
        fixed += j == i;
      }
      if (n >= 100) {
        EXPECT_LT(fixed, n / 10) << n;  // not the identity
      }
    }
  }
}

}  // namespace
}  // namespace mxrl
