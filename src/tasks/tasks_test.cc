#include "tasks/tasks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {

using u128 = unsigned __int128;

const std::vector<std::string> kSpecs = {"addition",
                                         "addition:digits=1",
                                         "addition:digits=12",
                                         "addition:digits=30",
                                         "addition:digits=3,carry_drop=60",
                                         "multiplication",
                                         "multiplication:digits=1",
                                         "multiplication:digits=19",
                                         "sort",
                                         "sort:len=1,max=9999",
                                         "sort:len=50,max=3",
                                         "countdown",
                                         "countdown:count=2,max=5",
                                         "countdown:count=6,max=100"};

std::string error_of(const std::string& spec) {
  return test::error_of([&] { make_task(spec); });
}

// ---- independent arithmetic for checking answers --------------------------

u128 parse_u128(const std::string& s) {
  EXPECT_FALSE(s.empty());
  u128 v = 0;
  for (char c : s) {
    EXPECT_TRUE(c >= '0' && c <= '9') << s;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v;
}

std::string to_string_u128(u128 v) {
  if (v == 0) return "0";
  std::string s;
  while (v) {
    s.push_back(static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  }
  return {s.rbegin(), s.rend()};
}

// A decimal operand as the generator must write it: digits only, no leading
// zero unless it is "0", at most max_digits long.
void expect_operand(const std::string& s, int max_digits) {
  ASSERT_FALSE(s.empty());
  EXPECT_LE(s.size(), static_cast<size_t>(max_digits)) << s;
  EXPECT_TRUE(s.size() == 1 || s[0] != '0') << s;
  EXPECT_EQ(s.find_first_not_of("0123456789"), std::string::npos) << s;
}

std::vector<int64_t> split_numbers(const std::string& s) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t sp = std::min(s.find(' ', pos), s.size());
    const std::string tok = s.substr(pos, sp - pos);
    EXPECT_FALSE(tok.empty()) << "\"" << s << "\"";
    EXPECT_EQ(tok.find_first_not_of("0123456789"), std::string::npos) << tok;
    EXPECT_TRUE(tok.size() == 1 || tok[0] != '0') << tok;
    v.push_back(std::stoll(tok));
    pos = sp + 1;
  }
  return v;
}

// Shunting-yard evaluator for + - * and parentheses (the generator's answers).
int64_t eval_expr(const std::string& s, std::vector<int64_t>* numbers) {
  std::vector<int64_t> vals;
  std::vector<char> ops;
  auto prec = [](char op) { return op == '*' ? 2 : op == '(' ? 0 : 1; };
  auto apply = [&]() {
    const int64_t b = vals.back();
    vals.pop_back();
    const int64_t a = vals.back();
    vals.pop_back();
    const char op = ops.back();
    ops.pop_back();
    vals.push_back(op == '+' ? a + b : op == '-' ? a - b : a * b);
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      int64_t v = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
      vals.push_back(v);
      numbers->push_back(v);
      continue;
    }
    if (c == '(') {
      ops.push_back(c);
    } else if (c == ')') {
      while (ops.back() != '(') apply();
      ops.pop_back();
    } else {
      EXPECT_TRUE(c == '+' || c == '-' || c == '*') << s;
      while (!ops.empty() && prec(ops.back()) >= prec(c)) apply();
      ops.push_back(c);
    }
    ++i;
  }
  while (!ops.empty()) apply();
  EXPECT_EQ(vals.size(), 1u) << s;
  return vals.back();
}

// ---- specs ----------------------------------------------------------------

TEST(Tasks, NamesAreCanonical) {
  EXPECT_EQ(task_names(), (std::vector<std::string>{"addition", "multiplication", "sort", "countdown"}));
  EXPECT_EQ(make_task("addition")->name(), "addition:digits=3");
  EXPECT_EQ(make_task("addition:digits=5")->name(), "addition:digits=5");
  // carry_drop is named only when set, so plain addition keeps its name.
  EXPECT_EQ(make_task("addition:carry_drop=0")->name(), "addition:digits=3");
  EXPECT_EQ(make_task("addition:carry_drop=60,digits=2")->name(), "addition:digits=2,carry_drop=60");
  EXPECT_EQ(make_task("multiplication")->name(), "multiplication:digits=2");
  EXPECT_EQ(make_task("sort")->name(), "sort:len=5,max=99");
  EXPECT_EQ(make_task("sort:max=50,len=3")->name(), "sort:len=3,max=50");
  EXPECT_EQ(make_task("countdown")->name(), "countdown:count=4,max=10");
  EXPECT_EQ(make_task("countdown:max=20")->name(), "countdown:count=4,max=20");
  // The canonical name makes the same task.
  for (const std::string& spec : kSpecs) {
    const auto t = make_task(spec);
    const auto again = make_task(t->name());
    EXPECT_EQ(again->name(), t->name());
    EXPECT_EQ(again->generate(Split::Train, 3, 4).prompt, t->generate(Split::Train, 3, 4).prompt);
  }
}

TEST(Tasks, BadSpecsListTheKnownTasks) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"subtraction", "unknown task \"subtraction\""},
      {"", "unknown task \"\""},
      {"Addition", "unknown task \"Addition\""},
      {"addition:width=3", "unknown option \"width\" for task addition"},
      {"sort:digits=3", "unknown option \"digits\" for task sort"},
      {"addition:digits=0", "option digits: \"0\" is not an integer in 1..30"},
      {"addition:digits=31", "option digits: \"31\" is not an integer in 1..30"},
      {"multiplication:digits=20", "option digits: \"20\" is not an integer in 1..19"},
      {"addition:digits=x", "option digits: \"x\" is not an integer in 1..30"},
      {"addition:digits=3x", "option digits: \"3x\" is not an integer in 1..30"},
      {"addition:digits=", "option digits: \"\" is not an integer in 1..30"},
      {"addition:digits=-3", "option digits: \"-3\" is not an integer in 1..30"},
      {"addition:digits=99999999999999999999", "is not an integer in 1..30"},
      {"countdown:count=1", "option count: \"1\" is not an integer in 2..6"},
      {"sort:len=3,len=4", "option len given twice"},
      {"addition:", "empty option list after ':'"},
      {"addition:digits=3,", "empty option"},
      {"addition:digits", "option \"digits\" is not key=value"},
      {"addition:carry_drop=101", "option carry_drop: \"101\" is not an integer in 0..100"},
      {"jsonl", "jsonl needs a path"},
      {"jsonl:", "jsonl needs a path"},
  };
  for (const auto& [spec, want] : cases) {
    const std::string msg = error_of(spec);
    EXPECT_NE(msg.find("task spec \"" + spec + "\": " + (want.starts_with("is not") ? "" : want)), std::string::npos)
        << spec << " -> " << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << spec << " -> " << msg;
    for (const char* known :
         {"addition (digits=1..30, default 3; carry_drop=0..100, default 0)",
          "multiplication (digits=1..19, default 2)", "sort (len=1..50, default 5; max=1..9999, default 99)",
          "countdown (count=2..6, default 4; max=1..100, default 10)", "jsonl:PATH"})
      EXPECT_NE(msg.find(known), std::string::npos) << spec << " -> " << msg;
  }
}

// ---- determinism ----------------------------------------------------------

TEST(Tasks, DeterministicInSplitSeedIndex) {
  for (const std::string& spec : kSpecs) {
    const auto a = make_task(spec), b = make_task(spec);
    for (Split split : {Split::Train, Split::Eval}) {
      std::set<std::string> by_index, seed1, seed2;
      int same_across_seeds = 0;
      for (uint64_t i = 0; i < 200; ++i) {
        const Problem p = a->generate(split, 1, i), q = b->generate(split, 1, i);
        EXPECT_EQ(p.prompt, q.prompt) << spec;
        EXPECT_EQ(p.answer, q.answer) << spec;
        by_index.insert(p.prompt);
        const Problem r = a->generate(split, 2, i);
        same_across_seeds += r.prompt == p.prompt;
      }
      // Problems repeat only as often as the problem space dictates: tiny
      // spaces (1-digit operands: 100 prompts, ~10 in Eval) repeat a lot, and
      // 1-digit operands are a third to a half of the draws of 2- and 3-digit
      // tasks, so their Eval draws repeat too.
      const bool tiny =
          spec == "addition:digits=1" || spec == "multiplication:digits=1" || spec == "countdown:count=2,max=5";
      if (!tiny) {
        EXPECT_GE(by_index.size(), split == Split::Train ? 170u : 100u) << spec << " " << split_name(split);
        EXPECT_LE(same_across_seeds, 10) << spec << " " << split_name(split);
      } else {
        EXPECT_GE(by_index.size(), split == Split::Train ? 40u : 5u) << spec;
        EXPECT_LE(same_across_seeds, split == Split::Train ? 30 : 80) << spec;
      }
    }
  }
}

// Pins the generators: a change here changes every experiment's data.
TEST(Tasks, GoldenProblems) {
  const std::vector<std::tuple<std::string, Split, uint64_t, uint64_t, std::string, std::string>> golden = {
      {"addition:digits=3", Split::Train, 0, 0, "10+53=", "63"},
      {"addition:digits=3", Split::Eval, 0, 0, "0+39=", "39"},
      {"addition:digits=12", Split::Train, 42, 7, "4+72601941072=", "72601941076"},
      {"multiplication:digits=2", Split::Train, 1, 2, "2*76=", "152"},
      {"multiplication:digits=2", Split::Eval, 1, 3, "7*4=", "28"},
      {"sort:len=5,max=99", Split::Train, 0, 0, "sort 86 0 60 8 53:", "0 8 53 60 86"},
      {"sort:len=5,max=99", Split::Eval, 3, 1000000, "sort 89 70 21 17 23:", "17 21 23 70 89"},
      {"countdown:count=4,max=10", Split::Train, 0, 0, "reach 2 with 7 1 1 9:", "9+1-7-1"},
      {"countdown:count=4,max=10", Split::Eval, 9, 5, "reach 4 with 6 9 2 5:", "2+6+5-9"},
      {"countdown:count=6,max=100", Split::Train, 2, 1, "reach 6462 with 77 44 64 67 79 78:", "77-79+64*(78-44+67)"},
  };
  for (const auto& [spec, split, seed, index, prompt, answer] : golden) {
    const Problem p = make_task(spec)->generate(split, seed, index);
    EXPECT_EQ(p.prompt, prompt) << spec;
    EXPECT_EQ(p.answer, answer) << spec;
  }
}

// ---- splits ---------------------------------------------------------------

TEST(Tasks, PromptHashIsXxh3Mod10) {
  for (const std::string p : {"", "1+2=", "sort 1 2 3:", "reach 24 with 3 4 6 2:"}) {
    EXPECT_EQ(prompt_hash(p), XXH3_64bits(p.data(), p.size()));
    EXPECT_EQ(is_eval_prompt(p), XXH3_64bits(p.data(), p.size()) % 10 == 0);
    EXPECT_EQ(split_of(p), is_eval_prompt(p) ? Split::Eval : Split::Train);
  }
}

TEST(Tasks, SplitsAreDisjoint) {
  for (const std::string& spec : kSpecs) {
    const auto t = make_task(spec);
    std::set<std::string> train, eval;
    for (uint64_t i = 0; i < 5000; ++i) {
      const Problem p = t->generate(Split::Train, 7, i);
      EXPECT_FALSE(is_eval_prompt(p.prompt)) << spec << " " << p.prompt;
      train.insert(p.prompt);
    }
    for (uint64_t i = 0; i < 500; ++i) {
      const Problem p = t->generate(Split::Eval, 8, i);
      EXPECT_TRUE(is_eval_prompt(p.prompt)) << spec << " " << p.prompt;
      eval.insert(p.prompt);
    }
    for (const std::string& p : eval) EXPECT_EQ(train.count(p), 0u) << spec << ": " << p << " in both splits";
  }
}

// Raw draws made by the test itself (uniform operands, sort lists): the hash
// puts ~10% of them in Eval.
TEST(Tasks, EvalIsAboutTenPercentOfDraws) {
  std::mt19937_64 rng(123);
  int eval_add = 0, eval_sort = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const uint64_t a = rng() % 1000, b = rng() % 1000;
    const std::string add = fmt::format("{}+{}=", a, b);
    eval_add += is_eval_prompt(add);
    std::string sort = "sort";
    for (int k = 0; k < 5; ++k) sort += fmt::format(" {}", rng() % 100);
    eval_sort += is_eval_prompt(sort + ":");
  }
  EXPECT_NEAR(eval_add / double(n), 0.1, 0.01);
  EXPECT_NEAR(eval_sort / double(n), 0.1, 0.01);
}

// addition:digits=1 has exactly 100 prompts (a+b=, a,b in 0..9): Eval draws
// cover exactly the Eval ones and Train draws the rest.
TEST(Tasks, SplitsPartitionASmallSpace) {
  std::set<std::string> want_train, want_eval;
  for (int a = 0; a < 10; ++a)
    for (int b = 0; b < 10; ++b) {
      const std::string p = std::to_string(a) + "+" + std::to_string(b) + "=";
      (is_eval_prompt(p) ? want_eval : want_train).insert(p);
    }
  ASSERT_FALSE(want_eval.empty());
  EXPECT_GE(want_eval.size(), 3u);
  EXPECT_LE(want_eval.size(), 20u);
  const auto t = make_task("addition:digits=1");
  std::set<std::string> train, eval;
  for (uint64_t i = 0; i < 3000; ++i) {
    train.insert(t->generate(Split::Train, 0, i).prompt);
    eval.insert(t->generate(Split::Eval, 0, i).prompt);
  }
  EXPECT_EQ(train, want_train);
  EXPECT_EQ(eval, want_eval);
}

TEST(Tasks, TooSmallForASplitFails) {
  // sort:len=1,max=1 has two prompts, "sort 0:" and "sort 1:", both in Train.
  ASSERT_FALSE(is_eval_prompt("sort 0:"));
  ASSERT_FALSE(is_eval_prompt("sort 1:"));
  const auto t = make_task("sort:len=1,max=1");
  EXPECT_NO_THROW(t->generate(Split::Train, 0, 0));
  try {
    t->generate(Split::Eval, 0, 0);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "task sort:len=1,max=1: no eval problem found in 1000 draws (the problem space is too small to split)");
  }
}

// ---- answers --------------------------------------------------------------

// a + b where the carries at the positions set in `dropped` (bit i: the carry
// out of digit i, least significant first) are forgotten.
std::string sum_dropping(const std::string& a, const std::string& b, unsigned dropped) {
  std::string r;
  int carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
    int d = carry;
    if (i < a.size()) d += a[a.size() - 1 - i] - '0';
    if (i < b.size()) d += b[b.size() - 1 - i] - '0';
    r.insert(r.begin(), static_cast<char>('0' + d % 10));
    carry = d >= 10 && !(dropped >> i & 1u);
  }
  const size_t nz = r.find_first_not_of('0');
  return nz == std::string::npos ? "0" : r.substr(nz);
}

TEST(Tasks, WeakTeacherForgetsCarriesAtItsRateAndTheVerifierStillWantsTheSum) {
  const auto plain = make_task("addition:digits=3");
  // carry_drop=0 is the plain task: the same problems, no demonstration.
  const auto zero = make_task("addition:digits=3,carry_drop=0");
  for (uint64_t i = 0; i < 200; ++i) {
    const Problem p = plain->generate(Split::Train, 9, i), q = zero->generate(Split::Train, 9, i);
    EXPECT_EQ(p.prompt, q.prompt);
    EXPECT_TRUE(q.demo.empty());
    EXPECT_EQ(q.sft_target(), q.answer);
  }
  // carry_drop=100 forgets every carry: digit-wise sums mod 10.
  const auto all = make_task("addition:digits=3,carry_drop=100");
  for (uint64_t i = 0; i < 200; ++i) {
    const Problem p = all->generate(Split::Train, 9, i);
    const size_t plus = p.prompt.find('+');
    const std::string a = p.prompt.substr(0, plus), b = p.prompt.substr(plus + 1, p.prompt.size() - plus - 2);
    EXPECT_EQ(p.answer, sum_dropping(a, b, 0)) << p.prompt;
    EXPECT_EQ(p.sft_target(), sum_dropping(a, b, ~0u)) << p.prompt;
  }
  // carry_drop=60: each demonstration is the sum with some subset of its
  // carries forgotten; over problems with exactly one carry, 60% forget it.
  const auto weak = make_task("addition:digits=3,carry_drop=60");
  int one_carry = 0, forgot = 0;
  for (Split split : {Split::Train, Split::Eval})
    for (uint64_t i = 0; i < 4000; ++i) {
      const Problem p = weak->generate(split, 9, i);
      const size_t plus = p.prompt.find('+');
      const std::string a = p.prompt.substr(0, plus), b = p.prompt.substr(plus + 1, p.prompt.size() - plus - 2);
      ASSERT_EQ(p.answer, sum_dropping(a, b, 0)) << p.prompt;
      std::set<std::string> possible;
      for (unsigned m = 0; m < 16; ++m) possible.insert(sum_dropping(a, b, m));
      EXPECT_TRUE(possible.count(p.sft_target())) << p.prompt << " -> " << p.sft_target();
      EXPECT_EQ(weak->verify(p, p.answer), true);
      EXPECT_EQ(weak->verify(p, p.sft_target()), p.sft_target() == p.answer) << p.prompt;
      int carries = 0;
      for (unsigned bit = 0; bit < 4; ++bit) carries += sum_dropping(a, b, 1u << bit) != p.answer;
      if (carries == 1) ++one_carry, forgot += p.sft_target() != p.answer;
    }
  ASSERT_GT(one_carry, 1500);
  EXPECT_NEAR(static_cast<double>(forgot) / one_carry, 0.60, 0.04) << forgot << "/" << one_carry;
}

TEST(Tasks, AdditionAnswersAreSums) {
  for (int digits : {1, 3, 5, 18, 30}) {
    const auto t = make_task("addition:digits=" + std::to_string(digits));
    std::map<size_t, int> lengths;
    for (Split split : {Split::Train, Split::Eval})
      for (uint64_t i = 0; i < 2000; ++i) {
        const Problem p = t->generate(split, 5, i);
        const size_t plus = p.prompt.find('+');
        ASSERT_NE(plus, std::string::npos) << p.prompt;
        ASSERT_TRUE(p.prompt.ends_with("=")) << p.prompt;
        const std::string a = p.prompt.substr(0, plus), b = p.prompt.substr(plus + 1, p.prompt.size() - plus - 2);
        expect_operand(a, digits);
        expect_operand(b, digits);
        ++lengths[a.size()];
        ++lengths[b.size()];
        EXPECT_EQ(p.answer, to_string_u128(parse_u128(a) + parse_u128(b))) << p.prompt;
      }
    // Operand lengths are uniform in 1..digits (8000 operands per task).
    EXPECT_EQ(lengths.size(), static_cast<size_t>(digits));
    for (const auto& [len, count] : lengths) EXPECT_NEAR(count, 8000.0 / digits, 8000.0 / digits * 0.25 + 30) << len;
  }
}

TEST(Tasks, MultiplicationAnswersAreProducts) {
  for (int digits : {1, 2, 4, 10, 19}) {
    const auto t = make_task("multiplication:digits=" + std::to_string(digits));
    size_t max_len = 0;
    for (Split split : {Split::Train, Split::Eval})
      for (uint64_t i = 0; i < 2000; ++i) {
        const Problem p = t->generate(split, 6, i);
        const size_t star = p.prompt.find('*');
        ASSERT_NE(star, std::string::npos) << p.prompt;
        ASSERT_TRUE(p.prompt.ends_with("=")) << p.prompt;
        const std::string a = p.prompt.substr(0, star), b = p.prompt.substr(star + 1, p.prompt.size() - star - 2);
        expect_operand(a, digits);
        expect_operand(b, digits);
        max_len = std::max({max_len, a.size(), b.size()});
        EXPECT_EQ(p.answer, to_string_u128(parse_u128(a) * parse_u128(b))) << p.prompt;
      }
    EXPECT_EQ(max_len, static_cast<size_t>(digits));
  }
  EXPECT_EQ(make_task("multiplication")->verify({"12*34=", "408"}, "408"), true);
}

TEST(Tasks, SortAnswersAreSorted) {
  for (auto [len, max] : std::vector<std::pair<int, int>>{{5, 99}, {1, 9999}, {50, 3}, {7, 1000}}) {
    const auto t = make_task("sort:len=" + std::to_string(len) + ",max=" + std::to_string(max));
    int64_t seen_max = 0;
    for (Split split : {Split::Train, Split::Eval})
      for (uint64_t i = 0; i < 1000; ++i) {
        const Problem p = t->generate(split, 9, i);
        ASSERT_TRUE(p.prompt.starts_with("sort ") && p.prompt.ends_with(":")) << p.prompt;
        std::vector<int64_t> v = split_numbers(p.prompt.substr(5, p.prompt.size() - 6));
        EXPECT_EQ(v.size(), static_cast<size_t>(len)) << p.prompt;
        for (int64_t x : v) {
          EXPECT_GE(x, 0);
          EXPECT_LE(x, max);
          seen_max = std::max(seen_max, x);
        }
        std::sort(v.begin(), v.end());
        EXPECT_EQ(split_numbers(p.answer), v) << p.prompt << " -> " << p.answer;
      }
    if (len * 2000 >= 20 * max) {
      EXPECT_EQ(seen_max, max);  // the top value is drawn too
    }
  }
}

TEST(Tasks, CountdownAnswersReachTheTarget) {
  for (auto [count, max] : std::vector<std::pair<int, int>>{{4, 10}, {2, 5}, {6, 100}, {3, 50}}) {
    const auto t = make_task("countdown:count=" + std::to_string(count) + ",max=" + std::to_string(max));
    for (Split split : {Split::Train, Split::Eval})
      for (uint64_t i = 0; i < 1000; ++i) {
        const Problem p = t->generate(split, 10, i);
        ASSERT_TRUE(p.prompt.starts_with("reach ") && p.prompt.ends_with(":")) << p.prompt;
        const size_t with = p.prompt.find(" with ");
        ASSERT_NE(with, std::string::npos) << p.prompt;
        const int64_t target = std::stoll(p.prompt.substr(6, with - 6));
        std::vector<int64_t> nums = split_numbers(p.prompt.substr(with + 6, p.prompt.size() - with - 7));
        EXPECT_EQ(nums.size(), static_cast<size_t>(count)) << p.prompt;
        for (int64_t x : nums) {
          EXPECT_GE(x, 1);
          EXPECT_LE(x, max);
        }
        EXPECT_GE(target, 1) << p.prompt;
        std::vector<int64_t> used;
        EXPECT_EQ(eval_expr(p.answer, &used), target) << p.prompt << " " << p.answer;
        std::sort(used.begin(), used.end());
        std::sort(nums.begin(), nums.end());
        EXPECT_EQ(used, nums) << p.prompt << " " << p.answer;  // every number exactly once
        EXPECT_TRUE(t->verify(p, p.answer)) << p.prompt << " " << p.answer;
        EXPECT_TRUE(t->verify(p, "(" + p.answer + ")")) << p.prompt << " " << p.answer;
        EXPECT_FALSE(t->verify(p, p.answer + "+1")) << p.prompt << " " << p.answer;
        EXPECT_FALSE(t->verify(p, "(" + p.answer + ")*" + std::to_string(nums[0]))) << p.prompt;  // reuse
      }
  }
}

TEST(Tasks, CountdownAnswersUseMinimalParentheses) {
  // Only a sum or difference ever needs parentheses (as an operand of '*', or
  // as the right operand of '-'): a parenthesized group never holds a bare
  // number or a product at its top level.
  const auto t = make_task("countdown:count=6,max=10");
  int with_parens = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const Problem p = t->generate(Split::Train, 11, i);
    EXPECT_EQ(p.answer.find(' '), std::string::npos) << p.answer;
    with_parens += p.answer.find('(') != std::string::npos;
    for (size_t open = p.answer.find('('); open != std::string::npos; open = p.answer.find('(', open + 1)) {
      int depth = 0;
      bool top_level_sum = false;
      size_t close = open;
      for (; close < p.answer.size(); ++close) {
        const char c = p.answer[close];
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        if (depth == 1 && (c == '+' || c == '-')) top_level_sum = true;
        if (depth == 0) break;
      }
      ASSERT_LT(close, p.answer.size()) << p.answer;
      EXPECT_TRUE(top_level_sum) << p.answer;
      // "(a+b)+c", "a+(b+c)", "a+(b-c)" and "(a-b)-c" need none.
      const char before = open > 0 ? p.answer[open - 1] : '\0';
      const char after = close + 1 < p.answer.size() ? p.answer[close + 1] : '\0';
      EXPECT_TRUE(before == '*' || before == '-' || after == '*') << p.answer;
    }
  }
  EXPECT_GT(with_parens, 200);  // parentheses are used where needed
}

// ---- verify ---------------------------------------------------------------

TEST(Tasks, ExactMatchVerify) {
  for (const std::string spec : {"addition", "multiplication:digits=5", "sort", "sort:len=10,max=999"}) {
    const auto t = make_task(spec);
    for (uint64_t i = 0; i < 200; ++i) {
      const Problem p = t->generate(Split::Train, 12, i);
      EXPECT_TRUE(t->verify(p, p.answer));
      EXPECT_TRUE(t->verify(p, "  " + p.answer + "\n\n"));
      EXPECT_TRUE(t->verify(p, "\n " + p.answer + " "));
      EXPECT_FALSE(t->verify(p, ""));
      EXPECT_FALSE(t->verify(p, "\n  \n"));
      EXPECT_FALSE(t->verify(p, p.answer + "0"));
      EXPECT_FALSE(t->verify(p, "1" + p.answer));
      EXPECT_FALSE(t->verify(p, p.answer + "."));
      EXPECT_FALSE(t->verify(p, p.answer + "\nx"));
      EXPECT_FALSE(t->verify(p, p.prompt + p.answer));
      std::string off = p.answer;
      off.back() = off.back() == '9' ? '8' : static_cast<char>(off.back() + 1);
      EXPECT_FALSE(t->verify(p, off)) << off;
    }
  }
  const auto sort = make_task("sort");
  const Problem p{"sort 31 7 85 7 2:", "2 7 7 31 85"};
  EXPECT_TRUE(sort->verify(p, "2 7 7 31 85"));
  EXPECT_TRUE(sort->verify(p, " 2 7 7 31 85\n"));
  EXPECT_FALSE(sort->verify(p, "2  7 7 31 85"));
  EXPECT_FALSE(sort->verify(p, "2 7 31 85"));
  EXPECT_FALSE(sort->verify(p, "2,7,7,31,85"));
  EXPECT_EQ(trim_completion(" \n a b \n "), "a b");
  EXPECT_EQ(trim_completion(" \n "), "");
}

TEST(Tasks, CountdownVerifyParsesAndEvaluates) {
  const auto t = make_task("countdown");
  const Problem p{"reach 24 with 3 4 6 2:", "(6-3)*4*2"};
  for (const char* ok :
       {"(6-3)*4*2", "4*6", "6*4", "2*3*4", "6*4*(3-2)", " 2 * ( 3 * 4 ) ", "\n(6+2)*3\n", "((4))*((6))", "3*(6+2)"}) {
    EXPECT_TRUE(t->verify(p, ok)) << ok;
  }
  for (const char* bad : {
           "(6-2)*(3+3)",  // reuses 3
           "(6-2)*3*2",    // reuses 2
           "4*6*1",        // 1 is not given
           "8*3",          // 8 is not given
           "24",           // 24 is not given
           "6*4+2-2",      // reuses 2
           "04*6",         // leading zero
           "4*6=24",       // not an expression
           "4*6)",         // unbalanced
           "(4*6",         // unbalanced
           "4**6",         // malformed
           "4*",           // malformed
           "*4*6",         // malformed
           "4 6",          // missing operator
           "",             // empty
           "   ",          // empty
           "6/2*4*2",      // division is not allowed (and reuses 2)
           "6*2*(4/2)",    // division
           "3*4*2+6",      // 30
           "3+4+6+2",      // 15
           "4*6.",         // trailing junk
           "4*6\tx",       // junk
           "2*3*4 + 0",    // 0 not given
           "(3*6-2)+4*2",  // reuses 2 (value 24)
           "+4*6",         // unary plus
       }) {
    EXPECT_FALSE(t->verify(p, bad)) << bad;
  }
  // Division with numbers that would otherwise be fine.
  EXPECT_FALSE(t->verify({"reach 3 with 6 2:", "6-2-1"}, "6/2"));
  EXPECT_TRUE(t->verify({"reach 3 with 6 2 5:", "x"}, "5-2"));
  // Unary minus is not allowed.
  EXPECT_TRUE(t->verify({"reach 2 with 3 5:", "5-3"}, "5-3"));
  EXPECT_FALSE(t->verify({"reach 2 with 3 5:", "5-3"}, "-3+5"));
  EXPECT_FALSE(t->verify({"reach 2 with 3 5:", "5-3"}, "5+-3"));
  // Repeated numbers in the prompt may each be used once.
  EXPECT_TRUE(t->verify({"reach 49 with 7 7:", "7*7"}, "7*7"));
  EXPECT_FALSE(t->verify({"reach 49 with 7 3:", "x"}, "7*7"));
  EXPECT_FALSE(t->verify({"reach 343 with 7 7:", "x"}, "7*7*7"));
  // Deep nesting is rejected, not a stack overflow; moderate nesting is fine.
  EXPECT_TRUE(t->verify(p, std::string(20, '(') + "4*6" + std::string(20, ')')));
  EXPECT_FALSE(t->verify(p, std::string(100000, '(') + "4*6" + std::string(100000, ')')));
  // Overflow is a wrong answer, not undefined behavior.
  EXPECT_FALSE(
      t->verify({"reach 5 with 4000000000 4000000000 4000000000 5:", "x"}, "4000000000*4000000000*4000000000+5"));
  EXPECT_FALSE(
      t->verify({"reach 1 with 999999999999999999 999999999999999999:", "x"}, "999999999999999999+999999999999999999"));
  // A prompt that is not a countdown prompt is an error.
  for (const char* bad_prompt :
       {"1+2=", "reach 24 with 3 4:x", "reach 24 with :", "reach x with 3 4:", "reach 24 with 3  4:"}) {
    EXPECT_THROW(t->verify({bad_prompt, "x"}, "3*4"), Error) << bad_prompt;
  }
}

// ---- charset --------------------------------------------------------------

TEST(Tasks, OnlyCharsetCharacters) {
  std::set<char> used;
  for (const std::string& spec : kSpecs) {
    const auto t = make_task(spec);
    for (Split split : {Split::Train, Split::Eval})
      for (uint64_t i = 0; i < 500; ++i) {
        const Problem p = t->generate(split, 13, i);
        EXPECT_FALSE(p.prompt.empty());
        EXPECT_FALSE(p.answer.empty());
        for (const std::string* s : {&p.prompt, &p.answer})
          for (char c : *s) {
            EXPECT_NE(kTaskCharset.find(c), std::string_view::npos) << spec << ": " << *s;
            used.insert(c);
          }
      }
  }
  EXPECT_GT(used.size(), 20u);
  EXPECT_EQ(kTaskCharset, "0123456789+-*/=()<>[],.:;?!'\" \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
}

}  // namespace
}  // namespace mxrl
