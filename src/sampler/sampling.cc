#include "sampler/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernels/ops/ops.h"
#include "numerics/rng.h"
#include "util/error.h"

namespace mxrl {

void SamplingParams::validate() const {
  if (std::isnan(temperature) || temperature < 0.0f || std::isinf(temperature))
    fail("sampling: temperature must be a finite number >= 0 (0 is greedy), got {}", temperature);
  if (std::isnan(top_p) || !(top_p > 0.0f) || top_p > 1.0f) fail("sampling: top_p must be in (0, 1], got {}", top_p);
  if (top_k < 0) fail("sampling: top_k must be >= 0 (0 turns it off), got {}", top_k);
}

double sample_uniform(uint64_t seed, uint64_t request, uint64_t sample, uint64_t step) {
  uint64_t h = splitmix64_mix(seed + kGolden);
  h = splitmix64_mix(h + splitmix64_mix(request + 2 * kGolden));
  h = splitmix64_mix(h + splitmix64_mix(sample + 3 * kGolden));
  h = splitmix64_mix(h + splitmix64_mix(step + 4 * kGolden));
  return static_cast<double>(h >> 11) * 0x1p-53;
}

namespace {

void check_vocab(int64_t vocab) {
  if (vocab <= 0 || vocab > std::numeric_limits<int32_t>::max())
    fail("sampling: vocabulary size must be in [1, 2^31), got {}", vocab);
}

// The max of v[0..n) (logits, or logits / temperature); fails on NaN / +inf
// and when every value is -inf. 16 independent lanes so the loop vectorizes
// (max is exact in any order once NaN is excluded).
float checked_max(const float* v, int64_t n, const float* logits, float temperature) {
  float mx[16];
  int32_t bad[16] = {};
  for (int l = 0; l < 16; ++l) mx[l] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) {
      const float x = v[i + l];
      mx[l] = x > mx[l] ? x : mx[l];
      bad[l] |= !(x < INFINITY);  // NaN or +inf
    }
  }
  for (; i < n; ++i) {
    mx[0] = v[i] > mx[0] ? v[i] : mx[0];
    bad[0] |= !(v[i] < INFINITY);
  }
  float m = mx[0];
  int32_t any_bad = bad[0];
  for (int l = 1; l < 16; ++l) {
    m = mx[l] > m ? mx[l] : m;
    any_bad |= bad[l];
  }
  if (any_bad) {
    for (i = 0; i < n; ++i) {
      if (v[i] < INFINITY) continue;
      if (std::isnan(logits[i])) fail("sampling: logit {} is NaN", i);
      if (std::isinf(logits[i])) fail("sampling: logit {} is +inf", i);
      fail("sampling: logit {} = {} overflows to +inf when divided by temperature {}", i, logits[i], temperature);
    }
  }
  if (m == -INFINITY) fail("sampling: all {} logits are -inf", n);
  return m;
}

// The logits at temperature T: the logits themselves when T is 0 or 1 (no
// division), else scratch[0..vocab) = logits / T, checked; *max_out = their
// max. scratch gets `room` more floats after that (at scratch.data() +
// scratch.size() - room).
const float* scaled_logits(const float* logits, int64_t vocab, float temperature, std::vector<float>& scratch,
                           float* max_out, size_t room = 0) {
  const float* x = logits;
  const bool divide = temperature != 0.0f && temperature != 1.0f;
  scratch.resize((divide ? static_cast<size_t>(vocab) : 0) + room);
  if (divide) {
    for (int64_t i = 0; i < vocab; ++i) scratch[i] = logits[i] / temperature;
    x = scratch.data();
  }
  *max_out = checked_max(x, vocab, logits, temperature);
  return x;
}

float gather_logprob(const float* x, int64_t vocab, int32_t token) {
  float lp;
  log_softmax_gather(&lp, x, &token, 1, vocab);
  return lp;
}

struct Buffers {
  std::vector<uint64_t> keys, tmp;  // candidates as (~bits(p) << 32) | id: ascending = the probability order
  std::vector<int32_t> ids;         // a set in token-id order
  std::vector<uint8_t> mark;        // membership, for turning a large set into ids
};

Buffers& buffers() {
  thread_local Buffers b;
  return b;
}

// The sort key of token i: ascending order of keys is p descending, then id
// ascending (p >= 0, so its bit pattern orders like its value).
inline uint64_t order_key(const float* p, int64_t i) {
  uint32_t pb;
  std::memcpy(&pb, &p[i], 4);
  return (static_cast<uint64_t>(~pb) << 32) | static_cast<uint32_t>(i);
}
inline int32_t key_id(uint64_t key) { return static_cast<int32_t>(static_cast<uint32_t>(key)); }

// Sorts keys that arrive in increasing id order: a stable LSD radix sort on
// the upper 32 bits (11 + 11 + 10 bits) keeps equal probabilities in id order.
void sort_keys_by_id_stable(std::vector<uint64_t>& keys, std::vector<uint64_t>& tmp) {
  if (keys.size() < 2048) {
    std::sort(keys.begin(), keys.end());
    return;
  }
  tmp.resize(keys.size());
  static constexpr int kShift[3] = {32, 43, 54};
  static constexpr int kBits[3] = {11, 11, 10};
  std::vector<size_t> count(size_t(1) << 11);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShift[pass];
    const uint64_t mask = (uint64_t(1) << kBits[pass]) - 1;
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t k : keys) ++count[(k >> shift) & mask];
    size_t sum = 0;
    for (auto& c : count) {
      const size_t n = c;
      c = sum;
      sum += n;
    }
    for (uint64_t k : keys) tmp[count[(k >> shift) & mask]++] = k;
    keys.swap(tmp);
  }
}

// Sum of p over the ids in `ids` (increasing), in FP64.
double sum_ids(const std::vector<int32_t>& ids, const float* p) {
  double s = 0.0;
  for (int32_t i : ids) s += static_cast<double>(p[i]);
  return s;
}

// The ids of keys[0..n), in increasing id order (a sort when n is small, a
// marking pass over the vocabulary when it is not).
void ids_of(std::vector<int32_t>& ids, const std::vector<uint64_t>& keys, size_t n, int64_t vocab,
            std::vector<uint8_t>& mark) {
  ids.resize(n);
  if (n * 32 < static_cast<size_t>(vocab)) {
    for (size_t j = 0; j < n; ++j) ids[j] = key_id(keys[j]);
    std::sort(ids.begin(), ids.end());
    return;
  }
  mark.assign(static_cast<size_t>(vocab), 0);
  for (size_t j = 0; j < n; ++j) mark[key_id(keys[j])] = 1;
  size_t out = 0;
  for (int64_t i = 0; i < vocab; ++i)
    if (mark[i]) ids[out++] = static_cast<int32_t>(i);
}

// Inverse-CDF draw over the ids in `ids` (increasing), whose FP64 sum is total.
int32_t draw_from_set(const std::vector<int32_t>& ids, const float* p, double total, double u) {
  const double target = u * total;
  double acc = 0.0;
  int32_t last_positive = -1;
  for (int32_t i : ids) {
    if (!(p[i] > 0.0f)) continue;
    acc += static_cast<double>(p[i]);
    if (acc > target) return i;
    last_positive = i;
  }
  return last_positive;
}

// The length of the shortest prefix of keys[0..n) (the probability order)
// whose running FP64 sum of p reaches target; 0 when it never does.
size_t top_p_prefix(const std::vector<uint64_t>& keys, size_t n, const float* p, double target) {
  double acc = 0.0;
  for (size_t j = 0; j < n; ++j) {
    acc += static_cast<double>(p[key_id(keys[j])]);
    if (acc >= target) return j + 1;
  }
  return 0;
}

// p: the FP32 softmax of the logits at temperature T (canonical kernel).
int32_t sample_filtered(const float* p, int64_t vocab, const SamplingParams& sp, double u) {
  const bool use_k = sp.top_k > 0 && sp.top_k < vocab;
  const bool use_p = sp.top_p < 1.0f;

  if (!use_k && !use_p) {  // no filtering: two passes in token-id order, no sort
    double total = 0.0;
    for (int64_t i = 0; i < vocab; ++i) total += static_cast<double>(p[i]);
    const double target = u * total;
    double acc = 0.0;
    int32_t last_positive = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      if (!(p[i] > 0.0f)) continue;
      acc += static_cast<double>(p[i]);
      if (acc > target) return static_cast<int32_t>(i);
      last_positive = static_cast<int32_t>(i);
    }
    return last_positive;
  }

  Buffers& b = buffers();
  std::vector<uint64_t>& keys = b.keys;
  std::vector<int32_t>& ids = b.ids;
  if (use_k) {  // partial selection of the top_k keys, then top_p within them
    const size_t k = static_cast<size_t>(sp.top_k);
    keys.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) keys[i] = order_key(p, i);
    if (k * 16 <= keys.size()) {
      std::partial_sort(keys.begin(), keys.begin() + k, keys.end());
    } else {
      std::nth_element(keys.begin(), keys.begin() + k, keys.end());
      std::sort(keys.begin(), keys.begin() + k);
    }
    ids_of(ids, keys, k, vocab, b.mark);
    double total = sum_ids(ids, p);
    if (use_p) {
      const size_t len = top_p_prefix(keys, k, p, static_cast<double>(sp.top_p) * total);
      if (len != 0 && len != k) {
        ids_of(ids, keys, len, vocab, b.mark);
        total = sum_ids(ids, p);
      }
    }
    return draw_from_set(ids, p, total, u);
  }

  // top_p alone over the whole vocabulary. The tokens with p >= t are exactly
  // the first ones of the probability order, so if their sorted running sum
  // reaches the target the prefix is the one a full sort finds. Lower t until
  // it does; t = 0 is the full sort.
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += static_cast<double>(p[i]);
  const double target = static_cast<double>(sp.top_p) * total;
  for (const float t : {0x1p-10f, 0x1p-20f, 0x1p-40f, 0.0f}) {
    keys.clear();
    double any_order = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (p[i] >= t) {
        keys.push_back(order_key(p, i));
        any_order += static_cast<double>(p[i]);
      }
    }
    // The same sum in another order differs only by rounding (relative ~n * 2^-53).
    if (t > 0.0f && any_order < target * (1.0 - 1e-6)) continue;
    sort_keys_by_id_stable(keys, b.tmp);
    const size_t len = top_p_prefix(keys, keys.size(), p, target);
    if (len == 0) {
      if (t > 0.0f) continue;
      break;  // never reached (rounding): keep everything
    }
    ids_of(ids, keys, len, vocab, b.mark);
    return draw_from_set(ids, p, sum_ids(ids, p), u);
  }
  ids.resize(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  return draw_from_set(ids, p, total, u);
}

}  // namespace

Sampled sample_token(const float* logits, int64_t vocab, const SamplingParams& p, double u,
                     std::vector<float>& scratch) {
  p.validate();
  check_vocab(vocab);
  if (!(u >= 0.0 && u < 1.0)) fail("sampling: the uniform draw must be in [0, 1), got {}", u);
  // scratch = [logits / T (when T != 0, 1) | probabilities (when T > 0)]
  float m;
  const float* x =
      scaled_logits(logits, vocab, p.temperature, scratch, &m, p.temperature > 0.0f ? static_cast<size_t>(vocab) : 0);
  int32_t token = 0;
  if (p.temperature == 0.0f) {  // x = logits: the first position of the max
    while (!(logits[token] == m)) ++token;
  } else {
    float* probs = scratch.data() + scratch.size() - static_cast<size_t>(vocab);  // after x
    std::memcpy(probs, x, static_cast<size_t>(vocab) * sizeof(float));
    softmax_forward(probs, 1, vocab);
    token = sample_filtered(probs, vocab, p, u);
  }
  return {token, gather_logprob(x, vocab, token)};
}

float token_logprob(const float* logits, int64_t vocab, float temperature, int32_t token, std::vector<float>& scratch) {
  SamplingParams p;
  p.temperature = temperature;
  p.validate();
  check_vocab(vocab);
  if (token < 0 || token >= vocab) fail("sampling: token id {} is outside the vocabulary [0, {})", token, vocab);
  float m;
  const float* x = scaled_logits(logits, vocab, temperature, scratch, &m);
  return gather_logprob(x, vocab, token);
}

}  // namespace mxrl
