#include "tasks/tasks.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "tasks/dataset.h"
#include "tasks/random.h"
#include "util/error.h"

namespace mxrl {

namespace {

using detail::Rng;
using detail::stream_key;

// Redraws before giving up on a split (a problem space with no Eval prompt).
// With ~10% Eval, a legitimate search fails with probability 0.9^1000.
constexpr int kMaxDraws = 1000;
constexpr uint64_t kTaskStreamTag = 0x7461736B73ull;  // "tasks"

// ---- spec parsing --------------------------------------------------------

struct OptionDef {
  const char* name;
  int64_t min, max, def;
  bool named_at_default = true;  // false: the canonical name omits it at its default
};

struct TaskDef {
  const char* name;
  std::vector<OptionDef> options;
};

const std::vector<TaskDef>& task_defs() {
  static const std::vector<TaskDef> defs = {
      {"addition", {{"digits", 1, 30, 3}, {"carry_drop", 0, 100, 0, false}}},
      {"multiplication", {{"digits", 1, 19, 2}}},
      {"sort", {{"len", 1, 50, 5}, {"max", 1, 9999, 99}}},
      {"countdown", {{"count", 2, 6, 4}, {"max", 1, 100, 10}}},
  };
  return defs;
}

std::string describe_tasks() {
  std::string s = "known tasks: ";
  for (const TaskDef& t : task_defs()) {
    s += t.name;
    s += " (";
    for (size_t i = 0; i < t.options.size(); ++i) {
      const OptionDef& o = t.options[i];
      s += fmt::format("{}{}={}..{}, default {}", i ? "; " : "", o.name, o.min, o.max, o.def);
    }
    s += "), ";
  }
  s += "jsonl:PATH (a JSONL file of {\"prompt\": ..., \"answer\": ...} objects)";
  return s;
}

[[noreturn]] void spec_fail(const std::string& spec, const std::string& what) {
  fail("task spec \"{}\": {}; {}", spec, what, describe_tasks());
}

// Parsed options in the order of the definition.
std::vector<int64_t> parse_options(const std::string& spec, const TaskDef& def, std::string_view opts, bool has_colon) {
  std::vector<std::optional<int64_t>> values(def.options.size());
  if (has_colon && opts.empty()) spec_fail(spec, "empty option list after ':'");
  size_t pos = 0;
  while (has_colon && pos <= opts.size()) {
    const size_t comma = std::min(opts.find(',', pos), opts.size());
    const std::string_view item = opts.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) spec_fail(spec, "empty option");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) spec_fail(spec, fmt::format("option \"{}\" is not key=value", item));
    const std::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    size_t k = 0;
    while (k < def.options.size() && key != def.options[k].name) ++k;
    if (k == def.options.size()) spec_fail(spec, fmt::format("unknown option \"{}\" for task {}", key, def.name));
    if (values[k]) spec_fail(spec, fmt::format("option {} given twice", key));
    const OptionDef& o = def.options[k];
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (val.empty() || ec != std::errc() || end != val.data() + val.size() || v < o.min || v > o.max)
      spec_fail(spec, fmt::format("option {}: \"{}\" is not an integer in {}..{}", key, val, o.min, o.max));
    values[k] = v;
  }
  std::vector<int64_t> out;
  for (size_t k = 0; k < values.size(); ++k) out.push_back(values[k].value_or(def.options[k].def));
  return out;
}

std::string canonical_name(const TaskDef& def, const std::vector<int64_t>& values) {
  std::string s = def.name;
  bool first = true;
  for (size_t k = 0; k < values.size(); ++k) {
    if (!def.options[k].named_at_default && values[k] == def.options[k].def) continue;
    s += fmt::format("{}{}={}", first ? ":" : ",", def.options[k].name, values[k]);
    first = false;
  }
  return s;
}

// ---- decimal strings -----------------------------------------------------

// A number of `len` digits (len 1: 0..9; otherwise no leading zero), uniform.
std::string random_number(Rng& rng, int len) {
  std::string s;
  s.push_back(static_cast<char>('0' + (len == 1 ? rng.below(10) : 1 + rng.below(9))));
  for (int i = 1; i < len; ++i) s.push_back(static_cast<char>('0' + rng.below(10)));
  return s;
}

// An operand of 1..max_digits digits: the length uniform, then the value.
std::string random_operand(Rng& rng, int max_digits) {
  return random_number(rng, static_cast<int>(rng.range(1, max_digits)));
}

std::string strip_zeros(std::string s) {
  const size_t nz = s.find_first_not_of('0');
  return nz == std::string::npos ? "0" : s.substr(nz);
}

// Schoolbook arithmetic on decimal strings (no size limit).
// keep_carry(): whether a carry is propagated (a weak teacher forgets some).
template <class KeepCarry>
std::string add_decimal(const std::string& a, const std::string& b, KeepCarry keep_carry) {
  std::string r;
  int carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
    int d = carry;
    if (i < a.size()) d += a[a.size() - 1 - i] - '0';
    if (i < b.size()) d += b[b.size() - 1 - i] - '0';
    r.push_back(static_cast<char>('0' + d % 10));
    carry = d / 10 && keep_carry() ? 1 : 0;
  }
  std::reverse(r.begin(), r.end());
  return strip_zeros(r);
}

std::string add_decimal(const std::string& a, const std::string& b) {
  return add_decimal(a, b, [] { return true; });
}

std::string mul_decimal(const std::string& a, const std::string& b) {
  std::vector<int> acc(a.size() + b.size(), 0);  // little-endian digits
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < b.size(); ++j) acc[i + j] += (a[a.size() - 1 - i] - '0') * (b[b.size() - 1 - j] - '0');
  std::string r;
  int carry = 0;
  for (const int v : acc) {
    const int d = v + carry;
    r.push_back(static_cast<char>('0' + d % 10));
    carry = d / 10;
  }
  while (carry) {
    r.push_back(static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
  std::reverse(r.begin(), r.end());
  return strip_zeros(r);
}

// ---- task base -----------------------------------------------------------

// Draws from one stream per (seed, split, index) until the prompt falls in
// the requested split.
class BuiltinTask : public Task {
 public:
  explicit BuiltinTask(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  Problem generate(Split split, uint64_t seed, uint64_t index) const override {
    Rng rng(stream_key({kTaskStreamTag, seed, static_cast<uint64_t>(split), index}));
    for (int i = 0; i < kMaxDraws; ++i) {
      Problem p = draw(rng);
      if (split_of(p.prompt) == split) return p;
    }
    fail("task {}: no {} problem found in {} draws (the problem space is too small to split)", name_, split_name(split),
         kMaxDraws);
  }

 protected:
  virtual Problem draw(Rng& rng) const = 0;

 private:
  std::string name_;
};

class AdditionTask : public BuiltinTask {
 public:
  AdditionTask(std::string name, int digits, int carry_drop)
      : BuiltinTask(std::move(name)), digits_(digits), carry_drop_(carry_drop) {}

 protected:
  Problem draw(Rng& rng) const override {
    const std::string a = random_operand(rng, digits_), b = random_operand(rng, digits_);
    Problem p{a + "+" + b + "=", add_decimal(a, b)};
    // The weak teacher: each carry forgotten with probability carry_drop %.
    // Draws nothing at carry_drop=0, so those problems are the plain task's.
    if (carry_drop_ > 0) p.demo = add_decimal(a, b, [&] { return static_cast<int>(rng.below(100)) >= carry_drop_; });
    return p;
  }

 private:
  int digits_, carry_drop_;
};

class MultiplicationTask : public BuiltinTask {
 public:
  MultiplicationTask(std::string name, int digits) : BuiltinTask(std::move(name)), digits_(digits) {}

 protected:
  Problem draw(Rng& rng) const override {
    const std::string a = random_operand(rng, digits_), b = random_operand(rng, digits_);
    return {a + "*" + b + "=", mul_decimal(a, b)};
  }

 private:
  int digits_;
};

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? " " : "", v[i]);
  return s;
}

class SortTask : public BuiltinTask {
 public:
  SortTask(std::string name, int len, int64_t max) : BuiltinTask(std::move(name)), len_(len), max_(max) {}

 protected:
  Problem draw(Rng& rng) const override {
    std::vector<int64_t> v(len_);
    for (int64_t& x : v) x = rng.range(0, max_);
    std::string prompt = "sort " + join(v) + ":";
    std::sort(v.begin(), v.end());
    return {std::move(prompt), join(v)};
  }

 private:
  int len_;
  int64_t max_;
};

// ---- countdown -----------------------------------------------------------

struct Expr {
  std::string text;
  int prec;  // 3: number or parenthesized, 2: '*', 1: '+' or '-'
  int64_t value;
};

// A random expression over nums[lo, hi) (all used, in that order).
Expr random_expr(Rng& rng, const std::vector<int64_t>& nums, size_t lo, size_t hi) {
  if (hi - lo == 1) return {std::to_string(nums[lo]), 3, nums[lo]};
  const size_t mid = lo + 1 + rng.below(hi - lo - 1);
  const Expr l = random_expr(rng, nums, lo, mid), r = random_expr(rng, nums, mid, hi);
  static constexpr char kOps[] = {'+', '-', '*'};
  const char op = kOps[rng.below(3)];
  const int prec = op == '*' ? 2 : 1;
  const bool paren_l = l.prec < prec;
  const bool paren_r = r.prec < prec || (op == '-' && r.prec == prec);
  Expr e;
  e.text = (paren_l ? "(" + l.text + ")" : l.text) + op + (paren_r ? "(" + r.text + ")" : r.text);
  e.prec = prec;
  e.value = op == '+' ? l.value + r.value : op == '-' ? l.value - r.value : l.value * r.value;
  return e;
}

// Recursive-descent parser/evaluator for completions:
//   expr := term (('+' | '-') term)*;  term := factor ('*' factor)*;
//   factor := number | '(' expr ')';   spaces allowed between tokens.
class ExprParser {
 public:
  ExprParser(std::string_view s, std::vector<int64_t> available) : s_(s), available_(std::move(available)) {}

  // The value, or nullopt if malformed, a number is not available, or it overflows.
  std::optional<int64_t> parse() {
    const std::optional<int64_t> v = expr(0);
    skip_spaces();
    if (!v || pos_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void skip_spaces() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    skip_spaces();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::optional<int64_t> expr(int depth) {
    std::optional<int64_t> v = term(depth);
    while (v) {
      if (eat('+')) {
        const std::optional<int64_t> r = term(depth);
        int64_t out;
        if (!r || __builtin_add_overflow(*v, *r, &out)) return std::nullopt;
        v = out;
      } else if (eat('-')) {
        const std::optional<int64_t> r = term(depth);
        int64_t out;
        if (!r || __builtin_sub_overflow(*v, *r, &out)) return std::nullopt;
        v = out;
      } else {
        break;
      }
    }
    return v;
  }

  std::optional<int64_t> term(int depth) {
    std::optional<int64_t> v = factor(depth);
    while (v && eat('*')) {
      const std::optional<int64_t> r = factor(depth);
      int64_t out;
      if (!r || __builtin_mul_overflow(*v, *r, &out)) return std::nullopt;
      v = out;
    }
    return v;
  }

  std::optional<int64_t> factor(int depth) {
    if (eat('(')) {
      if (depth >= kMaxDepth) return std::nullopt;
      const std::optional<int64_t> v = expr(depth + 1);
      if (!v || !eat(')')) return std::nullopt;
      return v;
    }
    skip_spaces();
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    const std::string_view digits = s_.substr(start, pos_ - start);
    if (digits.empty() || (digits.size() > 1 && digits[0] == '0') || digits.size() > 18) return std::nullopt;
    int64_t v = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), v);
    const auto it = std::find(available_.begin(), available_.end(), v);
    if (it == available_.end()) return std::nullopt;  // not given, or already used
    available_.erase(it);
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::vector<int64_t> available_;
};

// Parses a decimal number without sign or leading zeros at s[pos]; advances pos.
std::optional<int64_t> take_number(std::string_view s, size_t& pos) {
  const size_t start = pos;
  while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
  const size_t n = pos - start;
  if (n == 0 || n > 18 || (n > 1 && s[start] == '0')) return std::nullopt;
  int64_t v = 0;
  std::from_chars(s.data() + start, s.data() + pos, v);
  return v;
}

class CountdownTask : public BuiltinTask {
 public:
  CountdownTask(std::string name, int count, int64_t max) : BuiltinTask(std::move(name)), count_(count), max_(max) {}

  bool verify(const Problem& p, std::string_view completion) const override {
    int64_t target = 0;
    std::vector<int64_t> nums;
    parse_prompt(p.prompt, target, nums);
    const std::optional<int64_t> v = ExprParser(trim_completion(completion), std::move(nums)).parse();
    return v && *v == target;
  }

 protected:
  Problem draw(Rng& rng) const override {
    std::vector<int64_t> nums(count_);
    for (int64_t& x : nums) x = rng.range(1, max_);
    for (;;) {
      std::vector<int64_t> order = nums;  // the expression's order: a random permutation
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
      const Expr e = random_expr(rng, order, 0, order.size());
      if (e.value >= 1) return {fmt::format("reach {} with {}:", e.value, join(nums)), e.text};
    }
  }

 private:
  // "reach T with a b c:"; throws on anything else.
  static void parse_prompt(std::string_view prompt, int64_t& target, std::vector<int64_t>& nums) {
    auto bad = [&]() { fail("countdown: malformed prompt \"{}\" (expected \"reach T with a b c:\")", prompt); };
    constexpr std::string_view kReach = "reach ", kWith = " with ";
    if (!prompt.starts_with(kReach)) bad();
    size_t pos = kReach.size();
    const std::optional<int64_t> t = take_number(prompt, pos);
    if (!t || prompt.substr(pos, kWith.size()) != kWith) bad();
    target = *t;
    pos += kWith.size();
    for (;;) {
      const std::optional<int64_t> x = take_number(prompt, pos);
      if (!x) bad();
      nums.push_back(*x);
      if (pos < prompt.size() && prompt[pos] == ' ') {
        ++pos;
      } else if (pos + 1 == prompt.size() && prompt[pos] == ':') {
        return;
      } else {
        bad();
      }
    }
  }

  int count_;
  int64_t max_;
};

}  // namespace

// ---- public --------------------------------------------------------------

bool Task::verify(const Problem& p, std::string_view completion) const {
  return trim_completion(completion) == trim_completion(p.answer);
}

uint64_t prompt_hash(std::string_view prompt) { return XXH3_64bits(prompt.data(), prompt.size()); }

bool is_eval_prompt(std::string_view prompt) { return prompt_hash(prompt) % 10 == 0; }

std::string_view trim_completion(std::string_view s) {
  const size_t b = s.find_first_not_of(" \n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \n");
  return s.substr(b, e - b + 1);
}

std::string_view split_name(Split s) { return s == Split::Train ? "train" : "eval"; }

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const TaskDef& t : task_defs()) names.push_back(t.name);
  return names;
}

std::unique_ptr<Task> make_task(const std::string& spec, int64_t max_positions) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  if (name == "jsonl") {
    if (colon == std::string::npos || colon + 1 == spec.size()) spec_fail(spec, "jsonl needs a path (jsonl:PATH)");
    return load_jsonl_task(spec.substr(colon + 1), max_positions > 0 ? jsonl_line_limit(max_positions) : 0);
  }
  const auto& defs = task_defs();
  const auto it = std::find_if(defs.begin(), defs.end(), [&](const TaskDef& d) { return name == d.name; });
  if (it == defs.end()) spec_fail(spec, fmt::format("unknown task \"{}\"", name));
  const std::string_view opts =
      colon == std::string::npos ? std::string_view() : std::string_view(spec).substr(colon + 1);
  const std::vector<int64_t> v = parse_options(spec, *it, opts, colon != std::string::npos);
  std::string canon = canonical_name(*it, v);
  if (name == "addition")
    return std::make_unique<AdditionTask>(std::move(canon), static_cast<int>(v[0]), static_cast<int>(v[1]));
  if (name == "multiplication") return std::make_unique<MultiplicationTask>(std::move(canon), static_cast<int>(v[0]));
  if (name == "sort") return std::make_unique<SortTask>(std::move(canon), static_cast<int>(v[0]), v[1]);
  return std::make_unique<CountdownTask>(std::move(canon), static_cast<int>(v[0]), v[1]);
}

}  // namespace mxrl
