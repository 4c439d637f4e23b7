// The pre-tokenizer: Split steps and ByteLevel's prefix space, applied to the
// pieces of one segment as `tokenizers`' PreTokenizedString::split does.
#include <algorithm>

#include "tokenizer/tokenizer_impl.h"

namespace mxrl::detail {

namespace {

struct Span {
  size_t start, end;
  bool flag;  // a match, then "remove" once the behavior is applied
};

// NormalizedString::split: the pieces of `s` for one Split step.
void split_piece(const std::string& s, const PreStep& step, pcre2_match_data_8* md, const std::string& label,
                 std::vector<std::pair<size_t, size_t>>& matches, std::vector<Span>& spans,
                 std::vector<std::string>& out) {
  // Pattern::find_matches: alternating (non-match, match) spans covering s.
  spans.clear();
  if (s.empty()) {
    spans.push_back({0, 0, false});
  } else {
    matches.clear();
    step.regex.find_all(s, md, label, matches);
    size_t prev = 0;
    for (auto [a, b] : matches) {
      if (prev != a) spans.push_back({prev, a, false});
      spans.push_back({a, b, true});
      prev = b;
    }
    if (prev != s.size()) spans.push_back({prev, s.size(), false});
  }
  if (step.invert)
    for (Span& sp : spans) sp.flag = !sp.flag;

  std::vector<Span> res;
  res.reserve(spans.size());
  switch (step.behavior) {
    case SplitBehavior::Isolated:
      for (const Span& sp : spans) res.push_back({sp.start, sp.end, false});
      break;
    case SplitBehavior::Removed: res = spans; break;
    case SplitBehavior::Contiguous: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.flag == prev_match && !res.empty())
          res.back().end = sp.end;
        else
          res.push_back({sp.start, sp.end, false});
        prev_match = sp.flag;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev_match = false;
      for (const Span& sp : spans) {
        if (sp.flag && !prev_match && !res.empty())
          res.back().end = sp.end;
        else
          res.push_back({sp.start, sp.end, false});
        prev_match = sp.flag;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->flag && !prev_match && !res.empty())
          res.back().start = it->start;
        else
          res.push_back({it->start, it->end, false});
        prev_match = it->flag;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
  }
  for (const Span& sp : res)
    if (!sp.flag && sp.end > sp.start) out.push_back(s.substr(sp.start, sp.end - sp.start));
}

}  // namespace

void pre_tokenize(std::string_view segment, const std::vector<PreStep>& steps, pcre2_match_data_8* md,
                  const std::string& label, std::vector<std::string>& pieces) {
  std::vector<std::string> cur, next;
  if (!segment.empty()) cur.emplace_back(segment);
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Span> spans;
  for (const PreStep& step : steps) {
    if (step.kind == PreStep::PrefixSpace) {
      for (std::string& p : cur)
        if (p.empty() || p[0] != ' ') p.insert(p.begin(), ' ');
      continue;
    }
    next.clear();
    for (const std::string& p : cur) split_piece(p, step, md, label, matches, spans, next);
    cur.swap(next);
  }
  for (std::string& p : cur)
    if (!p.empty()) pieces.push_back(std::move(p));
}

}  // namespace mxrl::detail
