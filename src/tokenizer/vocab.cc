// Vocab and MergeMap: open-addressing tables (a Qwen vocab is 151k tokens and
// 151k merges; node-based maps made loading several times slower).
#include <algorithm>
#include <functional>

#include "tokenizer/tokenizer_impl.h"
#include "util/splitmix.h"

namespace mxrl::detail {

namespace {

uint64_t hash_bytes(std::string_view s) { return std::hash<std::string_view>{}(s); }

}  // namespace

void Vocab::reserve(size_t n) {
  entries_.reserve(n);
  if (n * 2 > by_token_.size()) rehash(n * 2);
}

void Vocab::rehash(size_t want) {
  size_t cap = 16;
  while (cap < want) cap *= 2;
  by_token_.assign(cap, 0);
  by_id_.assign(cap, 0);
  for (uint32_t i = 0; i < entries_.size(); ++i) place(i);
}

void Vocab::place(uint32_t index) {
  const size_t mask = by_token_.size() - 1;
  for (size_t s = entries_[index].hash & mask;; s = (s + 1) & mask)
    if (by_token_[s] == 0) {
      by_token_[s] = index + 1;
      break;
    }
  for (size_t s = splitmix64_mix(uint32_t(entries_[index].id)) & mask;; s = (s + 1) & mask)
    if (by_id_[s] == 0) {
      by_id_[s] = index + 1;
      break;
    }
}

Vocab::Insert Vocab::insert(std::string_view token, int32_t id) {
  const uint64_t h = hash_bytes(token);
  if (find_hashed(token, h) >= 0) return Insert::DuplicateToken;
  if (this->token(id)) return Insert::DuplicateId;
  if ((entries_.size() + 1) * 2 > by_token_.size()) rehash((entries_.size() + 1) * 4);
  entries_.push_back({h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id});
  arena_.append(token);
  place(static_cast<uint32_t>(entries_.size() - 1));
  return Insert::Ok;
}

int32_t Vocab::find_hashed(std::string_view token, uint64_t h) const {
  if (by_token_.empty()) return -1;
  const size_t mask = by_token_.size() - 1;
  for (size_t s = h & mask;; s = (s + 1) & mask) {
    const uint32_t e = by_token_[s];
    if (e == 0) return -1;
    const Entry& en = entries_[e - 1];
    if (en.hash == h && std::string_view(arena_).substr(en.off, en.len) == token) return en.id;
  }
}

int32_t Vocab::find(std::string_view token) const { return find_hashed(token, hash_bytes(token)); }

std::optional<std::string_view> Vocab::token(int32_t id) const {
  if (by_id_.empty()) return std::nullopt;
  const size_t mask = by_id_.size() - 1;
  for (size_t s = splitmix64_mix(uint32_t(id)) & mask;; s = (s + 1) & mask) {
    const uint32_t e = by_id_[s];
    if (e == 0) return std::nullopt;
    const Entry& en = entries_[e - 1];
    if (en.id == id) return std::string_view(arena_).substr(en.off, en.len);
  }
}

std::vector<std::pair<int32_t, std::string_view>> Vocab::by_id() const {
  std::vector<std::pair<int32_t, std::string_view>> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.emplace_back(e.id, std::string_view(arena_).substr(e.off, e.len));
  std::sort(out.begin(), out.end());
  return out;
}

void MergeMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap *= 2;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old;
  old.swap(slots_);
  slots_.assign(cap, Slot{kEmpty, {}});
  size_ = 0;
  for (const Slot& s : old)
    if (s.key != kEmpty) set(s.key, s.merge);
}

void MergeMap::set(uint64_t key, Merge m) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(size_ * 2 + 16);
  const size_t mask = slots_.size() - 1;
  for (size_t s = splitmix64_mix(key) & mask;; s = (s + 1) & mask) {
    if (slots_[s].key == key) {
      slots_[s].merge = m;  // a repeated merge takes its last rank
      return;
    }
    if (slots_[s].key == kEmpty) {
      slots_[s] = {key, m};
      ++size_;
      return;
    }
  }
}

const MergeMap::Merge* MergeMap::find(uint64_t key) const {
  if (size_ == 0) return nullptr;
  const size_t mask = slots_.size() - 1;
  for (size_t s = splitmix64_mix(key) & mask;; s = (s + 1) & mask) {
    if (slots_[s].key == key) return &slots_[s].merge;
    if (slots_[s].key == kEmpty) return nullptr;
  }
}

}  // namespace mxrl::detail
