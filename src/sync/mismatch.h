// The train/rollout mismatch metrics of docs/reference.md §7 as pure functions, in
// double precision: exact KL between two logit rows, entropy, and the
// per-token estimators (k1, k3, |dlogp|, importance weights). Used by the
// agreement check (sync/checks.h) and by the RL loop's per-step metrics.
#pragma once
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace mxrl {

// Mismatch between a sampler distribution p_s and a learner distribution p_l from
// raw FP32 logit rows of length `vocab` at temperature T: p = softmax(logits / T),
// computed in double. Logits may be -inf (probability 0); +inf or NaN, a row with
// no finite logit, vocab < 1 or T not finite and > 0 throw.
// KL(p_s || p_l) = sum_v p_s (log p_s - log p_l): exactly 0 for identical rows,
// +inf where p_l = 0 < p_s, clamped to >= 0 against rounding.
double exact_kl(const float* logits_sampler, const float* logits_learner, int64_t vocab, double temperature);
// -sum_v p log p (terms with p = 0 are 0).
double entropy(const float* logits, int64_t vocab, double temperature);

// Accumulates docs/reference.md §7's metrics over generated tokens. Per token: the learner's
// and the sampler's log-prob of the sampled token (finite, else add throws) and,
// optionally, the exact KL of that token's two distributions (NaN: unknown;
// otherwise >= 0, +inf allowed). With D = logp_learner - logp_sampler and w = e^D:
//   k1 = mean(-D), k3 = mean(e^D - 1 - D), abs_dlogp mean/max of |D|,
//   token_mult_prob_error = mean(e^|D|), is mean/max/min of w,
//   is_ess = (sum w)^2 / (n sum w^2), bitwise_equal: every D == 0 exactly.
// kl_mean / kl_max are over the tokens that came with a KL (kl_tokens).
// Getters return NaN when undefined (no tokens, or no KL for the kl ones).
class MismatchStats {
 public:
  void add(double logp_learner, double logp_sampler, double kl = std::numeric_limits<double>::quiet_NaN());
  void merge(const MismatchStats& other);  // as if other's tokens had been added here

  int64_t tokens() const { return n_; }
  int64_t kl_tokens() const { return kl_n_; }
  double kl_mean() const;
  double kl_max() const;
  double k1() const;
  double k3() const;
  double abs_dlogp_mean() const;
  double abs_dlogp_max() const;
  double token_mult_prob_error() const;
  double is_mean() const;
  double is_max() const;
  double is_min() const;
  double is_ess() const;
  bool bitwise_equal() const { return n_ > 0 && nonzero_ == 0; }

  // Keys: tokens, kl_tokens, kl_mean, kl_max, k1, k3, abs_dlogp_mean, abs_dlogp_max,
  // token_mult_prob_error, is_mean, is_max, is_min, is_ess, bitwise_equal.
  // Undefined values (see the getters) are null; bitwise_equal is null with no tokens.
  nlohmann::json to_json() const;

 private:
  int64_t n_ = 0, kl_n_ = 0, nonzero_ = 0;
  double kl_sum_ = 0, kl_max_ = 0;
  double neg_d_sum_ = 0, k3_sum_ = 0, abs_sum_ = 0, abs_max_ = 0, mult_sum_ = 0;
  double w_sum_ = 0, w_sq_sum_ = 0, w_max_ = 0, w_min_ = 0;
};

}  // namespace mxrl
