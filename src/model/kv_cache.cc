#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace mxrl {

KvCache::KvCache(const ModelConfig& cfg)
    : layers_(cfg.num_hidden_layers), groups_(cfg.num_key_value_heads), hd_(cfg.head_dim) {}

int KvCache::add_sequence() {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  k_.emplace_back();
  v_.emplace_back();
  cap_.push_back(0);
  len_.push_back(0);
  return static_cast<int>(len_.size()) - 1;
}

void KvCache::reset(int slot) { len_[slot] = 0; }

void KvCache::release(int slot) {
  k_[slot].reset();
  v_[slot].reset();
  cap_[slot] = len_[slot] = 0;
  free_.push_back(slot);
}

void KvCache::reserve(int slot, int64_t n) {
  if (n <= cap_[slot]) return;
  int64_t cap = std::max<int64_t>(n, cap_[slot] * 2);
  for (auto* buf : {&k_[slot], &v_[slot]}) {
    auto grown = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(layers_ * groups_ * cap * hd_));
    for (int64_t lg = 0; lg < layers_ * groups_ && len_[slot] > 0; ++lg)  // each (layer, group) history
      std::memcpy(&grown[lg * cap * hd_], buf->get() + lg * cap_[slot] * hd_, len_[slot] * hd_ * sizeof(float));
    *buf = std::move(grown);
  }
  cap_[slot] = cap;
}

void KvCache::copy_prefix(int src, int dst, int64_t n) {
  if (src == dst) fail("kv cache: copy_prefix from slot {} onto itself", src);
  if (n < 0 || n > len_[src])
    fail("kv cache: copy_prefix of {} positions from slot {} of length {}", n, src, len_[src]);
  reserve(dst, n);
  const size_t bytes = static_cast<size_t>(n * hd_) * sizeof(float);
  for (int64_t l = 0; l < layers_ && n > 0; ++l)
    for (int64_t g = 0; g < groups_; ++g) {
      std::memcpy(k(dst, l, g, 0), k(src, l, g, 0), bytes);
      std::memcpy(v(dst, l, g, 0), v(src, l, g, 0), bytes);
    }
  len_[dst] = n;
}

}  // namespace mxrl
