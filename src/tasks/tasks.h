// Verifiable tasks for supervised fine-tuning and RL.
//
// A Task draws problems (a prompt and one correct completion, the SFT target)
// deterministically from (split, seed, index), and verifies sampled
// completions. Built-in tasks use only the characters of the built-in
// character tokenizer (kTaskCharset).
//
// Train/Eval split: a prompt belongs to Eval iff is_eval_prompt(prompt),
// a fixed hash of the prompt text alone (no seed), true for ~10% of prompts.
// generate() redraws deterministically until the problem falls in the
// requested split, so the two splits never share a prompt, whatever the seeds.
//
// Built-in tasks and their formats (spec "name" or "name:key=value,...";
// name() gives every option, in a fixed order):
//   addition:digits=D        (D 1..30, default 3)   "123+4567=" -> "4690"
//       carry_drop=P (0..100, default 0; named only when set): the SFT
//       demonstrations come from a weak teacher that forgets each carry with
//       probability P % ("19+3=" -> "12" when it forgets); verify() and
//       evaluation still ask for the true sum. What RL can fix and SFT cannot.
//   multiplication:digits=D  (D 1..19, default 2)   "12*34="    -> "408"
//       Each operand: a length uniform in 1..D, then a value uniform among
//       numbers of that length (length 1 is 0..9), no leading zeros.
//   sort:len=L,max=M         (L 1..50 default 5, M 1..9999 default 99)
//       "sort 31 7 85 7 2:" -> "2 7 7 31 85"   (L values uniform in 0..M)
//   countdown:count=C,max=M  (C 2..6 default 4, M 1..100 default 10)
//       "reach 24 with 3 4 6 2:" -> "(6-2)*(3+3)"-style expression.
//       C numbers uniform in 1..M; the target is the value (>= 1) of a random
//       expression using every number once with + - * (the answer, printed
//       with minimal parentheses). verify() parses and evaluates the
//       completion: integers, + - *, parentheses and spaces only; each number
//       of the prompt used at most once (as a multiset), no other numbers, no
//       unary minus, no leading zeros; the value must equal the target.
//   jsonl:PATH                a JSONL dataset (see tasks/dataset.h).
//
// Tasks are immutable: generate() and verify() are safe to call from several
// threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mxrl {

// The characters of the built-in character tokenizer; every character of a
// built-in task's prompt and answer is one of these.
inline constexpr std::string_view kTaskCharset = kBuiltinCharset;

struct Problem {
  Problem() = default;
  Problem(std::string prompt_, std::string answer_, std::string demo_ = {})
      : prompt(std::move(prompt_)), answer(std::move(answer_)), demo(std::move(demo_)) {}
  std::string prompt, answer;  // answer: one correct completion
  // The SFT demonstration when it is not `answer` (a weak teacher's, which
  // may be wrong); empty: the demonstration is `answer`.
  std::string demo;
  const std::string& sft_target() const { return demo.empty() ? answer : demo; }
};

enum class Split { Train, Eval };

class Task {
 public:
  virtual ~Task() = default;
  // The spec it was made from, canonical (e.g. "addition:digits=3").
  virtual std::string name() const = 0;
  // Deterministic in (split, seed, index); Train and Eval never share a prompt.
  // Throws mxrl::Error if no problem of the split can be found (a problem
  // space too small to have any Eval prompt).
  virtual Problem generate(Split split, uint64_t seed, uint64_t index) const = 0;
  // Whether a completion (the sampled text after the prompt, end-of-text
  // token already removed) solves the problem. Default (exact-match tasks):
  // completion == answer after trimming leading/trailing spaces and newlines.
  virtual bool verify(const Problem& p, std::string_view completion) const;
};

// XXH3-64 (seed 0) of the prompt's bytes.
uint64_t prompt_hash(std::string_view prompt);
// prompt_hash(prompt) % 10 == 0: the prompt belongs to the Eval split.
bool is_eval_prompt(std::string_view prompt);
inline Split split_of(std::string_view prompt) { return is_eval_prompt(prompt) ? Split::Eval : Split::Train; }

// s without leading/trailing ' ' and '\n'.
std::string_view trim_completion(std::string_view s);

// Makes a task from a spec (see above). Throws mxrl::Error listing the known
// task names and their options on an unknown name, unknown or repeated
// option, or bad value; "jsonl:PATH" loads a dataset (load_jsonl_task),
// refusing lines longer than a model of max_positions positions can take
// (0: no bound).
std::unique_ptr<Task> make_task(const std::string& spec, int64_t max_positions = 0);
// The built-in task names: addition, multiplication, sort, countdown.
std::vector<std::string> task_names();

// "train" / "eval".
std::string_view split_name(Split s);

}  // namespace mxrl
