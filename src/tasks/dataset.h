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
// Line length: a line holds one prompt and its answer, which together must
// fit the model's positions; given a model's max_position_embeddings P, a
// line longer than jsonl_line_limit(P) = 128 * P + 4096 bytes is refused
// while reading ("data.jsonl:7: line longer than N bytes ..."), before the
// rest of it is read or any of it parsed. The bound is generous: a token of
// a BPE vocabulary rarely covers more than 16 bytes of text, and JSON escapes
// take at most 6 bytes per byte of it (a \\u escape), so 128 bytes per position
// (plus 4 KiB for the keys and other fields) only refuses lines that cannot
// fit. A 50 MB line is refused after reading ~64 KiB past the bound.
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

namespace mxrl {

class JsonlTask : public Task {
 public:
  // Parses JSONL text; `path` names it in errors and in name().
  // max_line_bytes > 0: a longer line is refused (see above).
  static std::unique_ptr<JsonlTask> parse(std::string_view text, const std::string& path, int64_t max_line_bytes = 0);

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

// The longest line a model of max_positions positions can take (see above).
int64_t jsonl_line_limit(int64_t max_positions);

// Reads and parses a JSONL file (see above); max_line_bytes > 0 bounds each
// line while reading (jsonl_line_limit of the model's positions).
std::unique_ptr<Task> load_jsonl_task(const std::string& path, int64_t max_line_bytes = 0);

}  // namespace mxrl
