// JSONL datasets as a Task.
//
// Each non-empty line (lines of only spaces, tabs or CR are empty) is a JSON
// object with string fields "prompt" and "answer"; other fields are ignored.
// Errors name the file and the 1-based line: "data.jsonl:7: missing \"answer\"",
// "data.jsonl:3: invalid JSON: ...", "data.jsonl:4: not a JSON object (array)",
// "data.jsonl:5: \"prompt\" is not a string (number)"; a file without items is
// "data.jsonl: empty file (no items)"; an unreadable one
// "data.jsonl: cannot read: <strerror>".
//
// Split: an item is in Eval iff is_eval_prompt(prompt) (tasks/tasks.h), the same
// prompt hash as the built-in tasks (~10% of items). Fallback: if that leaves
// either split empty, the last item (with every item sharing its prompt) goes
// to Eval and all the others to Train. A file with a single item, or whose
// items all share one prompt, cannot be split and is an error.
//
// generate(split, seed, index) is item number index % n (n: the split's size)
// of the split in an order shuffled per epoch: epoch = index / n, the order a
// pseudo-random permutation drawn from (seed, split, epoch). So every item of
// the split is seen exactly once per epoch. verify() is exact match after
// trimming leading/trailing spaces and newlines; name() is "jsonl:<path>".
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/tasks.h"

namespace mxrl::tasks {

class JsonlTask : public Task {
 public:
  // Parses JSONL text; `path` names it in errors and in name().
  static std::unique_ptr<JsonlTask> parse(std::string_view text, const std::string& path);

  std::string name() const override { return "jsonl:" + path_; }
  Problem generate(Split split, uint64_t seed, uint64_t index) const override;

  // The items of a split, in file order (never empty).
  const std::vector<Problem>& items(Split split) const { return split == Split::Train ? train_ : eval_; }
  // Whether the hash split left a split empty and the fallback was used.
  bool used_fallback() const { return fallback_; }

 private:
  JsonlTask() = default;
  std::string path_;
  std::vector<Problem> train_, eval_;
  bool fallback_ = false;
};

// Reads and parses a JSONL file (see above).
std::unique_ptr<Task> load_jsonl_task(const std::string& path);

}  // namespace mxrl::tasks
