// The BPE model: a pre-tokenized piece's bytes become byte-level symbols,
// then adjacent pairs merge by rank (lowest first, leftmost among equals)
// until no listed merge applies, as `tokenizers`' Word::merge_all does.
#include <fmt/format.h>

#include <mutex>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace mxrl::detail {

namespace {

constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 1 << 17;

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the word, -1 at the ends
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int32_t pos;  // index of the left symbol
  int32_t new_id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void Bpe::encode_word(std::string_view raw, const std::string& label, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (const int32_t id = vocab.find(to_byte_level(raw)); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  // Initial symbols, one per byte (each byte-level character), with
  // `tokenizers`' handling of characters missing from the vocab.
  std::vector<Symbol> syms;
  syms.reserve(raw.size());
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  };
  bool unk_pending = false;
  for (size_t i = 0; i < raw.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(raw[i]);
    if (byte_id[b] >= 0) {
      if (unk_pending) add(unk_id), unk_pending = false;
      add(byte_id[b]);
      continue;
    }
    if (byte_fallback) {  // "<0xC4>", "<0xA0>" for the byte-level character's UTF-8 ("Ġ")
      const std::string& ch = byte_char(b);
      int32_t ids[4];
      size_t n = 0;
      for (char c : ch) {
        const int32_t id = vocab.find(fmt::format("<0x{:02X}>", static_cast<uint8_t>(c)));
        if (id < 0) break;
        ids[n++] = id;
      }
      if (n == ch.size()) {
        for (size_t k = 0; k < n; ++k) add(ids[k]);
        continue;
      }
    }
    if (unk_id < 0) {
      // `tokenizers` silently drops the character; that is never what a caller wants.
      fail("{}: no token for {} (and the model has no unk_token)", label, describe_char(raw, i));
    }
    if (unk_pending && !fuse_unk) add(unk_id);
    unk_pending = true;
  }
  if (unk_pending) add(unk_id);

  if (syms.size() > 1 && !merge_map.empty()) {
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto push = [&](int32_t pos) {
      const int32_t nx = syms[pos].next;
      if (nx < 0) return;
      if (const MergeMap::Merge* m = merge_map.find(MergeMap::key(syms[pos].id, syms[nx].id)))
        queue.push({m->rank, pos, m->new_id});
    };
    for (int32_t p = 0; p + 1 < static_cast<int32_t>(syms.size()); ++p) push(p);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& left = syms[c.pos];
      if (!left.alive || left.next < 0) continue;
      // Stale when either symbol changed since the candidate was queued.
      const MergeMap::Merge* m = merge_map.find(MergeMap::key(left.id, syms[left.next].id));
      if (!m || m->new_id != c.new_id) continue;
      Symbol& right = syms[left.next];
      left.id = c.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) syms[right.next].prev = c.pos;
      if (left.prev >= 0) push(left.prev);
      push(c.pos);
    }
  }
  for (int32_t p = 0; p >= 0 && p < static_cast<int32_t>(syms.size()); p = syms[p].next) out.push_back(syms[p].id);
}

void Bpe::encode_cached(std::string_view raw, const std::string& label, std::vector<int32_t>& out) const {
  if (raw.size() > kMaxCachedWordBytes) return encode_word(raw, label, out);
  const std::string key(raw);
  {
    std::shared_lock lock(cache_mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t mark = out.size();
  encode_word(raw, label, out);
  std::unique_lock lock(cache_mu);
  if (cache.size() < kMaxCacheEntries) cache.emplace(key, std::vector<int32_t>(out.begin() + mark, out.end()));
}

}  // namespace mxrl::detail
