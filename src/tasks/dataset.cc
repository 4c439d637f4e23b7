#include "tasks/dataset.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tasks/random.h"
#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

namespace {

constexpr uint64_t kDatasetStreamTag = 0x6A736F6E6Cull;  // "jsonl"

[[noreturn]] void line_too_long(const std::string& path, size_t line_no, int64_t max_line_bytes) {
  fail("{}:{}: line longer than {} bytes, more than the model's positions allow", path, line_no, max_line_bytes);
}

// The file's bytes; with max_line_bytes > 0, stops at the first line longer
// than that (counting lines from 1), having read at most one buffer past it.
std::string read_file(const std::string& path, int64_t max_line_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot read: {}", path, std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  size_t line_start = 0, line_no = 1, scanned = 0;
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    data.append(buf, n);
    if (max_line_bytes > 0) {
      const size_t max = static_cast<size_t>(max_line_bytes);
      for (;;) {
        const size_t nl = data.find('\n', scanned);
        const size_t end = nl == std::string::npos ? data.size() : nl;
        if (end - line_start > max) {
          std::fclose(f);
          line_too_long(path, line_no, max_line_bytes);
        }
        if (nl == std::string::npos) break;
        line_start = scanned = nl + 1;
        ++line_no;
      }
      scanned = data.size();
    }
    if (n < sizeof buf) break;
  }
  const bool bad = std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (bad) fail("{}: cannot read: {}", path, std::strerror(err));
  return data;
}

}  // namespace

std::unique_ptr<JsonlTask> JsonlTask::parse(std::string_view text, const std::string& path, int64_t max_line_bytes) {
  using nlohmann::json;
  std::unique_ptr<JsonlTask> t(new JsonlTask());
  t->path_ = path;
  std::vector<Problem> items;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    ++line_no;
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (max_line_bytes > 0 && line.size() > static_cast<size_t>(max_line_bytes))
      line_too_long(path, line_no, max_line_bytes);
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const json j = json_parse(line, fmt::format("{}:{}", path, line_no));
    if (!j.is_object()) fail("{}:{}: not a JSON object ({})", path, line_no, j.type_name());
    Problem p;
    for (const char* key : {"prompt", "answer"}) {
      const auto it = j.find(key);
      if (it == j.end()) fail("{}:{}: missing \"{}\"", path, line_no, key);
      if (!it->is_string()) fail("{}:{}: \"{}\" is not a string ({})", path, line_no, key, it->type_name());
      (key[0] == 'p' ? p.prompt : p.answer) = it->get<std::string>();
    }
    items.push_back(std::move(p));
  }
  if (items.empty()) fail("{}: empty file (no items)", path);
  if (items.size() == 1) fail("{}: only 1 item; a dataset needs at least 2 (one for Train, one for Eval)", path);
  for (Problem& p : items) (is_eval_prompt(p.prompt) ? t->eval_ : t->train_).push_back(std::move(p));
  if (t->train_.empty() || t->eval_.empty()) {
    // Fallback: the last item (and its duplicates) in Eval, the rest in Train.
    std::vector<Problem> all;
    for (const std::vector<Problem>* v : {&t->train_, &t->eval_}) all.insert(all.end(), v->begin(), v->end());
    // Restore file order: one of the two was empty, so `all` is already in order.
    t->train_.clear();
    t->eval_.clear();
    const std::string last = all.back().prompt;
    for (Problem& p : all) (p.prompt == last ? t->eval_ : t->train_).push_back(std::move(p));
    if (t->train_.empty()) fail("{}: every item has the same prompt, so it cannot be split into Train and Eval", path);
    t->fallback_ = true;
  }
  return t;
}

Problem JsonlTask::generate(Split split, uint64_t seed, uint64_t index) const {
  const std::vector<Problem>& v = items(split);
  const uint64_t n = v.size();
  const uint64_t epoch = index / n;
  const uint64_t key = detail::stream_key({kDatasetStreamTag, seed, static_cast<uint64_t>(split), epoch});
  return v[detail::permute(index % n, n, key)];
}

int64_t jsonl_line_limit(int64_t max_positions) { return 128 * max_positions + 4096; }

std::unique_ptr<Task> load_jsonl_task(const std::string& path, int64_t max_line_bytes) {
  return JsonlTask::parse(read_file(path, max_line_bytes), path, max_line_bytes);
}

}  // namespace mxrl
