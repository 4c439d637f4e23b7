// libFuzzer target for the RL task code. The input is used three ways:
//  (a) as JSONL dataset text: it must parse or fail with mxrl::Error; a
//      dataset that parses has two non-empty splits sharing no prompt, holding
//      every item, and one epoch of generate() visits each item of a split
//      exactly once; every item verifies its own answer;
//  (b) as a task spec (the first line, unless it starts with "jsonl"):
//      make_task returns a task or fails with mxrl::Error; a task's problems
//      verify their own answers;
//  (c) as a countdown completion: verify() returns true or false.
// Any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "tasks/dataset.h"
#include "tasks/tasks.h"
#include "util/error.h"

using mxrl::JsonlTask;
using mxrl::Problem;
using mxrl::Split;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void fuzz_dataset(std::string_view text) {
  std::unique_ptr<JsonlTask> t;
  try {
    t = JsonlTask::parse(text, "fuzz.jsonl");
  } catch (const mxrl::Error&) {
    return;
  }
  const auto& train = t->items(Split::Train);
  const auto& eval = t->items(Split::Eval);
  check(!train.empty() && !eval.empty());
  std::set<std::string> train_prompts;
  for (const Problem& p : train) train_prompts.insert(p.prompt);
  for (const Problem& p : eval) check(!train_prompts.count(p.prompt));
  for (Split split : {Split::Train, Split::Eval}) {
    const auto& items = t->items(split);
    std::map<std::pair<std::string, std::string>, int> want, got;
    for (const Problem& p : items) ++want[{p.prompt, p.answer}];
    const uint64_t n = items.size();
    for (uint64_t i = 0; i < n; ++i) {
      const Problem p = t->generate(split, 1, n + i);  // epoch 1
      ++got[{p.prompt, p.answer}];
      check(t->verify(p, p.answer));
    }
    check(want == got);
  }
}

void fuzz_spec(std::string_view text) {
  const std::string spec(text.substr(0, std::min(text.find('\n'), text.size())));
  if (spec.starts_with("jsonl")) return;  // would read files
  std::unique_ptr<mxrl::Task> t;
  try {
    t = mxrl::make_task(spec);
  } catch (const mxrl::Error&) {
    return;
  }
  check(mxrl::make_task(t->name())->name() == t->name());
  for (Split split : {Split::Train, Split::Eval}) {
    try {
      const Problem p = t->generate(split, 0, 0);
      check(t->verify(p, p.answer));
      for (char c : p.prompt + p.answer) check(mxrl::kTaskCharset.find(c) != std::string_view::npos);
    } catch (const mxrl::Error&) {
      // A problem space too small to have this split.
    }
  }
}

void fuzz_countdown(std::string_view text) {
  static const auto t = mxrl::make_task("countdown");
  const Problem p{"reach 24 with 3 4 6 2:", "(6-3)*4*2"};
  (void)t->verify(p, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz_dataset(text);
  fuzz_spec(text);
  fuzz_countdown(text);
  return 0;
}
