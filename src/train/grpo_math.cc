#include "train/grpo_math.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.h"

namespace mxrl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Finds `s` among names(values[i]) or throws "<what> 'x' is unknown (accepted: a, b)".
template <typename E, size_t N>
E parse_enum(std::string_view s, const E (&values)[N], const char* what) {
  std::string accepted;
  for (E v : values) {
    if (s == name(v)) return v;
    accepted += accepted.empty() ? "" : ", ";
    accepted += name(v);
  }
  fail("{} '{}' is unknown (accepted: {})", what, s, accepted);
}

// Mean and unbiased standard deviation of r[begin, end) (std 0 for one value).
void mean_std(const std::vector<double>& r, size_t begin, size_t end, double* mean, double* std) {
  const double n = static_cast<double>(end - begin);
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += r[i];
  *mean = sum / n;
  double sq = 0;
  for (size_t i = begin; i < end; ++i) sq += (r[i] - *mean) * (r[i] - *mean);
  *std = end - begin > 1 ? std::sqrt(sq / (n - 1)) : 0.0;
}

bool all_equal(const std::vector<double>& r, size_t begin, size_t end) {
  for (size_t i = begin + 1; i < end; ++i)
    if (r[i] != r[begin]) return false;
  return true;
}

// The rollout weight of one token, or NaN when MIS rejects it.
double rollout_weight(const PolicyLossConfig& cfg, double logp_old, double logp_rollout) {
  if (cfg.correction == RolloutCorrection::None) return 1.0;
  const double w = std::exp(logp_old - logp_rollout);
  if (cfg.correction == RolloutCorrection::TIS) return std::min(w, cfg.cap);
  return (w < 1.0 / cfg.cap || w > cfg.cap) ? kNaN : w;
}

// True when the clipped branch of max(-A r, -A clip(r)) is the larger one with r
// outside the range, i.e. the token's gradient is 0.
bool is_clipped(double a, double ratio, const PolicyLossConfig& cfg) {
  return (a > 0 && ratio > 1.0 + cfg.clip_high) || (a < 0 && ratio < 1.0 - cfg.clip_low);
}

void check_shapes(const std::vector<std::vector<float>>& logp, const std::vector<std::vector<float>>& logp_old,
                  const std::vector<std::vector<float>>& logp_rollout, const std::vector<double>& adv,
                  bool need_rollout) {
  const size_t n = logp.size();
  if (logp_old.size() != n || adv.size() != n)
    fail("policy_loss: {} sequences of logp, {} of logp_old, {} advantages", n, logp_old.size(), adv.size());
  if (need_rollout && logp_rollout.size() != n)
    fail("policy_loss: {} sequences of logp, {} of logp_rollout (rollout correction needs them)", n,
         logp_rollout.size());
  if (!need_rollout && !logp_rollout.empty() && logp_rollout.size() != n)
    fail("policy_loss: {} sequences of logp, {} of logp_rollout", n, logp_rollout.size());
  for (size_t i = 0; i < n; ++i) {
    const size_t len = logp[i].size();
    if (logp_old[i].size() != len || (!logp_rollout.empty() && logp_rollout[i].size() != len))
      fail("policy_loss: sequence {}: {} logp, {} logp_old, {} logp_rollout", i, len, logp_old[i].size(),
           logp_rollout.empty() ? 0 : logp_rollout[i].size());
    if (!std::isfinite(adv[i])) fail("policy_loss: sequence {}: advantage {} is not finite", i, adv[i]);
    for (size_t t = 0; t < len; ++t) {
      const bool bad = !std::isfinite(logp[i][t]) || !std::isfinite(logp_old[i][t]) ||
                       (!logp_rollout.empty() && !std::isfinite(logp_rollout[i][t]));
      if (bad) fail("policy_loss: sequence {}, token {}: a log-prob is not finite", i, t);
    }
  }
}

}  // namespace

const char* name(AdvNorm norm) { return norm == AdvNorm::Std ? "std" : "none"; }

const char* name(LossAgg agg) {
  switch (agg) {
    case LossAgg::TokenMean: return "token-mean";
    case LossAgg::SeqMeanTokenSum: return "seq-mean-token-sum";
    case LossAgg::SeqMeanTokenMean: return "seq-mean-token-mean";
  }
  return "?";
}

const char* name(RolloutCorrection correction) {
  switch (correction) {
    case RolloutCorrection::None: return "none";
    case RolloutCorrection::TIS: return "tis";
    case RolloutCorrection::MIS: return "mis";
  }
  return "?";
}

AdvNorm parse_adv_norm(std::string_view s) {
  static constexpr AdvNorm kAll[] = {AdvNorm::Std, AdvNorm::None};
  return parse_enum(s, kAll, "advantage normalization");
}

LossAgg parse_loss_agg(std::string_view s) {
  static constexpr LossAgg kAll[] = {LossAgg::TokenMean, LossAgg::SeqMeanTokenSum, LossAgg::SeqMeanTokenMean};
  return parse_enum(s, kAll, "loss aggregation");
}

RolloutCorrection parse_rollout_correction(std::string_view s) {
  static constexpr RolloutCorrection kAll[] = {RolloutCorrection::None, RolloutCorrection::TIS, RolloutCorrection::MIS};
  return parse_enum(s, kAll, "rollout correction");
}

std::vector<double> group_advantages(const std::vector<double>& rewards, int64_t group_size, AdvNorm norm, double eps,
                                     AdvantageStats* stats) {
  if (group_size < 1) fail("group_advantages: group size {} < 1", group_size);
  if (rewards.size() % static_cast<size_t>(group_size) != 0)
    fail("group_advantages: {} rewards are not a multiple of the group size {}", rewards.size(), group_size);
  if (!(std::isfinite(eps) && eps >= 0)) fail("group_advantages: eps {} is not finite and >= 0", eps);
  for (size_t i = 0; i < rewards.size(); ++i)
    if (!std::isfinite(rewards[i])) fail("group_advantages: reward {} is {}", i, rewards[i]);

  const size_t g = static_cast<size_t>(group_size);
  std::vector<double> adv(rewards.size(), 0.0);
  AdvantageStats s;
  for (size_t begin = 0; begin < rewards.size(); begin += g) {
    ++s.groups;
    if (all_equal(rewards, begin, begin + g)) {
      ++s.zero_groups;
      continue;
    }
    double mean, std;
    mean_std(rewards, begin, begin + g, &mean, &std);
    for (size_t i = begin; i < begin + g; ++i)
      adv[i] = norm == AdvNorm::Std ? (rewards[i] - mean) / (std + eps) : rewards[i] - mean;
  }
  if (!rewards.empty()) mean_std(rewards, 0, rewards.size(), &s.reward_mean, &s.reward_std);
  if (stats) *stats = s;
  return adv;
}

void PolicyLossConfig::validate() const {
  if (!(std::isfinite(clip_low) && clip_low >= 0 && clip_low < 1))
    fail("policy loss: clip_low {} is not in [0, 1)", clip_low);
  if (!(std::isfinite(clip_high) && clip_high >= 0)) fail("policy loss: clip_high {} is not >= 0", clip_high);
  if (!(std::isfinite(cap) && cap >= 1)) fail("policy loss: cap {} is not finite and >= 1", cap);
}

PolicyLossResult policy_loss(const std::vector<std::vector<float>>& logp,
                             const std::vector<std::vector<float>>& logp_old,
                             const std::vector<std::vector<float>>& logp_rollout, const std::vector<double>& adv,
                             const PolicyLossConfig& cfg) {
  cfg.validate();
  check_shapes(logp, logp_old, logp_rollout, adv, cfg.correction != RolloutCorrection::None);
  const size_t n = logp.size();

  // Pass 1: ratio and rollout weight per token (NaN weight: rejected), and counts.
  std::vector<std::vector<double>> ratio(n), w(n);
  std::vector<int64_t> kept(n, 0);
  PolicyLossResult res;
  int64_t kept_total = 0, kept_seqs = 0;
  double ratio_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = logp[i].size();
    ratio[i].resize(len);
    w[i].resize(len);
    for (size_t t = 0; t < len; ++t) {
      ratio[i][t] = std::exp(static_cast<double>(logp[i][t]) - static_cast<double>(logp_old[i][t]));
      const double lr = logp_rollout.empty() ? logp_old[i][t] : logp_rollout[i][t];
      w[i][t] = rollout_weight(cfg, logp_old[i][t], lr);
      if (std::isnan(w[i][t]))
        ++res.masked;
      else
        ++kept[i];
      ratio_sum += ratio[i][t];
      res.ratio_max = std::max(res.ratio_max, ratio[i][t]);
    }
    res.tokens += static_cast<int64_t>(len);
    kept_total += kept[i];
    kept_seqs += kept[i] > 0;
  }

  // Pass 2: loss and -dloss/dlogp with each token's aggregation denominator.
  res.weight.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t len = logp[i].size();
    res.weight[i].assign(len, 0.0f);
    if (kept[i] == 0) continue;
    double denom = static_cast<double>(kept_total);
    if (cfg.agg == LossAgg::SeqMeanTokenSum) denom = static_cast<double>(kept_seqs);
    if (cfg.agg == LossAgg::SeqMeanTokenMean) denom = static_cast<double>(kept_seqs) * static_cast<double>(kept[i]);
    const double a = adv[i];
    for (size_t t = 0; t < len; ++t) {
      if (std::isnan(w[i][t])) continue;
      const double r = ratio[i][t];
      const double rc = std::clamp(r, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
      res.loss += w[i][t] * std::max(-a * r, -a * rc) / denom;
      if (is_clipped(a, r, cfg)) {
        ++res.clipped;
        continue;
      }
      res.weight[i][t] = static_cast<float>(a * r * w[i][t] / denom);
    }
  }
  if (res.tokens > 0) {
    res.mask_frac = static_cast<double>(res.masked) / static_cast<double>(res.tokens);
    res.ratio_mean = ratio_sum / static_cast<double>(res.tokens);
  }
  if (kept_total > 0) res.clip_frac = static_cast<double>(res.clipped) / static_cast<double>(kept_total);
  return res;
}

}  // namespace mxrl
