// The KV cache the forward pass reads and appends to, and the batch of
// tokens that says which cache slot and position each token belongs to.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.h"

namespace mxrl {

// Keys and values per sequence slot, after k_norm and RoPE, each KV group's
// history contiguous: [layer][group][pos][head_dim], growing as positions
// are written. Attention reads one group's history at a time: contiguous, it
// streams from memory, where 512-byte pieces of 4 KiB rows ([pos][kv_dim],
// the layout before) did not (docs/benchmarks.md#evening). A slot's
// storage is left uninitialized (only positions below its length are ever
// read), so reserving room the slot may never fill costs address space, not
// memory: the pages are touched as positions are written.
class KvCache {
 public:
  explicit KvCache(const ModelConfig& cfg);
  int add_sequence();      // an empty slot (reusing released ones)
  void reset(int slot);    // length back to 0
  void release(int slot);  // frees the slot's memory; add_sequence may reuse it
  int64_t length(int slot) const { return len_[slot]; }
  int num_slots() const { return static_cast<int>(len_.size()); }
  // Make room for positions [0, n) of a slot (kept positions are moved, so
  // reserving a sequence's whole length at once spares the copies).
  void reserve(int slot, int64_t n);
  void set_length(int slot, int64_t n) { len_[slot] = n; }
  // Positions [0, n) of every layer's keys and values of slot src, copied
  // bit for bit into slot dst, whose length becomes n (what it held is
  // overwritten). Throws mxrl::Error unless 0 <= n <= length(src) and the
  // slots are distinct.
  void copy_prefix(int src, int dst, int64_t n);
  // Group g's head_dim values at position pos; position pos + 1 follows at + head_dim.
  float* k(int slot, int64_t layer, int64_t g, int64_t pos) { return &k_[slot][at(slot, layer, g, pos)]; }
  float* v(int slot, int64_t layer, int64_t g, int64_t pos) { return &v_[slot][at(slot, layer, g, pos)]; }
  const float* k(int slot, int64_t layer, int64_t g, int64_t pos) const { return &k_[slot][at(slot, layer, g, pos)]; }
  const float* v(int slot, int64_t layer, int64_t g, int64_t pos) const { return &v_[slot][at(slot, layer, g, pos)]; }
  int64_t kv_dim() const { return groups_ * hd_; }
  int64_t head_dim() const { return hd_; }
  int64_t groups() const { return groups_; }

 private:
  int64_t at(int slot, int64_t layer, int64_t g, int64_t pos) const {
    return ((layer * groups_ + g) * cap_[slot] + pos) * hd_;
  }
  int64_t layers_, groups_, hd_;
  std::vector<std::unique_ptr<float[]>> k_, v_;
  std::vector<int64_t> cap_, len_;
  std::vector<int> free_;
};

// A batch of tokens: token i belongs to cache slot slot[i] at position
// pos[i]. A slot's tokens in one call must be consecutive positions
// continuing its cache (the first at the slot's current length).
struct TokenBatch {
  std::vector<int32_t> tokens, slot;
  std::vector<int64_t> pos;
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  void add(int32_t token, int s, int64_t p) { tokens.push_back(token), slot.push_back(s), pos.push_back(p); }
};

}  // namespace mxrl
