#include "sync/mismatch.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"

namespace mxrl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Log-softmax of logits / T into out (double); validates the row.
void log_softmax(const float* logits, int64_t vocab, double temperature, std::vector<double>& out) {
  if (vocab < 1) fail("log-softmax: vocab {} < 1", vocab);
  if (!(std::isfinite(temperature) && temperature > 0)) fail("log-softmax: temperature {} is not > 0", temperature);
  out.resize(static_cast<size_t>(vocab));
  double m = -kInf;
  for (int64_t v = 0; v < vocab; ++v) {
    const float x = logits[v];
    if (std::isnan(x) || x == kInf) fail("log-softmax: logit {} is {}", v, x);
    out[v] = static_cast<double>(x) / temperature;
    m = std::max(m, out[v]);
  }
  if (m == -kInf) fail("log-softmax: every logit is -inf");
  double sum = 0;
  for (double x : out) sum += std::exp(x - m);
  const double lse = m + std::log(sum);
  for (double& x : out) x -= lse;
}

}  // namespace

double exact_kl(const float* logits_sampler, const float* logits_learner, int64_t vocab, double temperature) {
  std::vector<double> ls, ll;
  log_softmax(logits_sampler, vocab, temperature, ls);
  log_softmax(logits_learner, vocab, temperature, ll);
  double kl = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    if (ls[v] == -kInf) continue;  // p_s = 0 contributes 0
    if (ll[v] == -kInf) return kInf;
    kl += std::exp(ls[v]) * (ls[v] - ll[v]);
  }
  return std::max(kl, 0.0);
}

double entropy(const float* logits, int64_t vocab, double temperature) {
  std::vector<double> lp;
  log_softmax(logits, vocab, temperature, lp);
  double h = 0;
  for (double x : lp)
    if (x != -kInf) h -= std::exp(x) * x;
  return std::max(h, 0.0);
}

void MismatchStats::add(double logp_learner, double logp_sampler, double kl) {
  if (!std::isfinite(logp_learner) || !std::isfinite(logp_sampler))
    fail("mismatch stats: log-probs {} (learner) and {} (sampler) must be finite", logp_learner, logp_sampler);
  if (!std::isnan(kl) && !(kl >= 0)) fail("mismatch stats: KL {} is negative", kl);
  const double d = logp_learner - logp_sampler;
  const double ad = std::abs(d);
  const double w = std::exp(d);
  if (n_ == 0) w_max_ = w_min_ = w;
  ++n_;
  nonzero_ += d != 0;
  neg_d_sum_ -= d;
  k3_sum_ += std::expm1(d) - d;
  abs_sum_ += ad;
  abs_max_ = std::max(abs_max_, ad);
  mult_sum_ += std::exp(ad);
  w_sum_ += w;
  w_sq_sum_ += w * w;
  w_max_ = std::max(w_max_, w);
  w_min_ = std::min(w_min_, w);
  if (!std::isnan(kl)) {
    ++kl_n_;
    kl_sum_ += kl;
    kl_max_ = std::max(kl_max_, kl);
  }
}

void MismatchStats::merge(const MismatchStats& o) {
  if (o.n_ == 0) return;
  if (n_ == 0) {
    *this = o;
    return;
  }
  n_ += o.n_;
  kl_n_ += o.kl_n_;
  nonzero_ += o.nonzero_;
  kl_sum_ += o.kl_sum_;
  kl_max_ = std::max(kl_max_, o.kl_max_);
  neg_d_sum_ += o.neg_d_sum_;
  k3_sum_ += o.k3_sum_;
  abs_sum_ += o.abs_sum_;
  abs_max_ = std::max(abs_max_, o.abs_max_);
  mult_sum_ += o.mult_sum_;
  w_sum_ += o.w_sum_;
  w_sq_sum_ += o.w_sq_sum_;
  w_max_ = std::max(w_max_, o.w_max_);
  w_min_ = std::min(w_min_, o.w_min_);
}

double MismatchStats::kl_mean() const { return kl_n_ ? kl_sum_ / static_cast<double>(kl_n_) : kNaN; }
double MismatchStats::kl_max() const { return kl_n_ ? kl_max_ : kNaN; }
double MismatchStats::k1() const { return n_ ? neg_d_sum_ / static_cast<double>(n_) : kNaN; }
double MismatchStats::k3() const { return n_ ? k3_sum_ / static_cast<double>(n_) : kNaN; }
double MismatchStats::abs_dlogp_mean() const { return n_ ? abs_sum_ / static_cast<double>(n_) : kNaN; }
double MismatchStats::abs_dlogp_max() const { return n_ ? abs_max_ : kNaN; }
double MismatchStats::token_mult_prob_error() const { return n_ ? mult_sum_ / static_cast<double>(n_) : kNaN; }
double MismatchStats::is_mean() const { return n_ ? w_sum_ / static_cast<double>(n_) : kNaN; }
double MismatchStats::is_max() const { return n_ ? w_max_ : kNaN; }
double MismatchStats::is_min() const { return n_ ? w_min_ : kNaN; }
double MismatchStats::is_ess() const { return n_ ? w_sum_ * w_sum_ / (static_cast<double>(n_) * w_sq_sum_) : kNaN; }

nlohmann::json MismatchStats::to_json() const {
  const auto num = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
  return {
      {"tokens", n_},
      {"kl_tokens", kl_n_},
      {"kl_mean", num(kl_mean())},
      {"kl_max", num(kl_max())},
      {"k1", num(k1())},
      {"k3", num(k3())},
      {"abs_dlogp_mean", num(abs_dlogp_mean())},
      {"abs_dlogp_max", num(abs_dlogp_max())},
      {"token_mult_prob_error", num(token_mult_prob_error())},
      {"is_mean", num(is_mean())},
      {"is_max", num(is_max())},
      {"is_min", num(is_min())},
      {"is_ess", num(is_ess())},
      {"bitwise_equal", n_ ? nlohmann::json(bitwise_equal()) : nlohmann::json(nullptr)},
  };
}

}  // namespace mxrl
