#include "train/grpo_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "util/error.h"

namespace mxrl {
namespace {

using Rows = std::vector<std::vector<float>>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

const LossAgg kAggs[] = {LossAgg::TokenMean, LossAgg::SeqMeanTokenSum, LossAgg::SeqMeanTokenMean};
const RolloutCorrection kCorrections[] = {RolloutCorrection::None, RolloutCorrection::TIS, RolloutCorrection::MIS};

std::string label(const PolicyLossConfig& cfg) { return std::string(name(cfg.agg)) + " x " + name(cfg.correction); }

// ---- Independent double-precision reference of the policy loss ----

struct RefLoss {
  double loss = 0;
  std::vector<std::vector<double>> grad;        // -dloss/dlogp
  std::vector<std::vector<bool>> zero_by_clip;  // the clipped branch wins with the ratio out of range
};

RefLoss ref_policy_loss(const Rows& lp, const Rows& lpo, const Rows& lpr, const std::vector<double>& adv,
                        const PolicyLossConfig& cfg) {
  const size_t n = lp.size();
  std::vector<std::vector<double>> wt(n);
  std::vector<std::vector<bool>> keep(n);
  std::vector<double> kept(n, 0);
  double total = 0, seqs = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t t = 0; t < lp[i].size(); ++t) {
      double w = 1;
      bool k = true;
      if (cfg.correction != RolloutCorrection::None) {
        const double rho = std::exp(double(lpo[i][t]) - double(lpr[i][t]));
        if (cfg.correction == RolloutCorrection::TIS) w = rho < cfg.cap ? rho : cfg.cap;
        if (cfg.correction == RolloutCorrection::MIS) {
          w = rho;
          k = rho >= 1 / cfg.cap && rho <= cfg.cap;
        }
      }
      wt[i].push_back(w);
      keep[i].push_back(k);
      kept[i] += k;
    }
    total += kept[i];
    seqs += kept[i] > 0;
  }
  RefLoss out;
  out.grad.resize(n);
  out.zero_by_clip.resize(n);
  const double lo = 1 - cfg.clip_low, hi = 1 + cfg.clip_high;
  for (size_t i = 0; i < n; ++i) {
    for (size_t t = 0; t < lp[i].size(); ++t) {
      out.grad[i].push_back(0);
      out.zero_by_clip[i].push_back(false);
      if (!keep[i][t]) continue;
      double scale = 1 / total;
      if (cfg.agg == LossAgg::SeqMeanTokenSum) scale = 1 / seqs;
      if (cfg.agg == LossAgg::SeqMeanTokenMean) scale = 1 / (seqs * kept[i]);
      const double a = adv[i];
      const double r = std::exp(double(lp[i][t]) - double(lpo[i][t]));
      const double rc = r < lo ? lo : (r > hi ? hi : r);
      const double l1 = -a * r, l2 = -a * rc;
      out.loss += (l1 > l2 ? l1 : l2) * wt[i][t] * scale;
      const bool in_range = r >= lo && r <= hi;
      double dl;  // d(max(l1, l2)) / dlogp
      if (l2 > l1) {
        dl = in_range ? -a * r : 0;
        out.zero_by_clip[i][t] = !in_range;
      } else {
        dl = -a * r;
      }
      out.grad[i][t] = -dl * wt[i][t] * scale;
    }
  }
  return out;
}

// ---- Advantages ----

TEST(GroupAdvantages, StdNormalizedMatchesHandValues) {
  const std::vector<double> r = {1, 0, 0, 1, 0.5, 1, 0, 0};
  AdvantageStats st;
  const auto a = group_advantages(r, 4, AdvNorm::Std, 1e-6, &st);
  ASSERT_EQ(a.size(), r.size());
  // Group 0: mean 0.5, unbiased std sqrt(1/3).
  const double s0 = std::sqrt(1.0 / 3.0);
  EXPECT_NEAR(a[0], 0.5 / (s0 + 1e-6), 1e-14);
  EXPECT_NEAR(a[1], -0.5 / (s0 + 1e-6), 1e-14);
  // Group 1 by plain loops.
  double m = (0.5 + 1 + 0 + 0) / 4, ss = 0;
  for (int i = 4; i < 8; ++i) ss += (r[i] - m) * (r[i] - m);
  const double s1 = std::sqrt(ss / 3);
  for (int i = 4; i < 8; ++i) EXPECT_NEAR(a[i], (r[i] - m) / (s1 + 1e-6), 1e-14) << i;
  // Advantages of a normalized group sum to 0.
  EXPECT_NEAR(a[4] + a[5] + a[6] + a[7], 0, 1e-14);
  EXPECT_EQ(st.groups, 2);
  EXPECT_EQ(st.zero_groups, 0);
  double mall = 0;
  for (double x : r) mall += x;
  mall /= 8;
  double vall = 0;
  for (double x : r) vall += (x - mall) * (x - mall);
  EXPECT_NEAR(st.reward_mean, mall, 1e-15);
  EXPECT_NEAR(st.reward_std, std::sqrt(vall / 7), 1e-15);
}

TEST(GroupAdvantages, AllEqualGroupIsExactlyZeroAndCounted) {
  // 0.1 * 3 / 3 != 0.1 in double: the rule, not the arithmetic, makes these 0.
  const std::vector<double> r = {0.1, 0.1, 0.1, 1, 0, 1, 7, 7, 7};
  for (AdvNorm norm : {AdvNorm::Std, AdvNorm::None}) {
    AdvantageStats st;
    const auto a = group_advantages(r, 3, norm, 1e-6, &st);
    for (int i : {0, 1, 2, 6, 7, 8}) EXPECT_EQ(a[i], 0.0) << i;
    EXPECT_NE(a[3], 0.0);
    EXPECT_EQ(st.groups, 3);
    EXPECT_EQ(st.zero_groups, 2);
  }
  // eps = 0 is allowed and an all-equal group still gives 0, not NaN.
  const auto a = group_advantages({1, 1}, 2, AdvNorm::Std, 0.0);
  EXPECT_EQ(a[0], 0.0);
  EXPECT_EQ(a[1], 0.0);
}

TEST(GroupAdvantages, GroupOfOneIsZero) {
  AdvantageStats st;
  const auto a = group_advantages({3, -1, 0.5}, 1, AdvNorm::Std, 1e-6, &st);
  EXPECT_EQ(a, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(st.groups, 3);
  EXPECT_EQ(st.zero_groups, 3);
}

TEST(GroupAdvantages, DrGrpoIsRewardMinusMean) {
  const std::vector<double> r = {1, 0, 0, 0, 2, 4};
  const auto a = group_advantages(r, 3, AdvNorm::None, 1e-6);
  EXPECT_DOUBLE_EQ(a[0], 1 - 1.0 / 3);
  EXPECT_DOUBLE_EQ(a[1], -1.0 / 3);
  EXPECT_DOUBLE_EQ(a[3], -2);
  EXPECT_DOUBLE_EQ(a[4], 0);
  EXPECT_DOUBLE_EQ(a[5], 2);
}

TEST(GroupAdvantages, BadInputsThrow) {
  EXPECT_THROW(group_advantages({1, 2, 3}, 2, AdvNorm::Std, 1e-6), Error);
  EXPECT_THROW(group_advantages({1, 2}, 0, AdvNorm::Std, 1e-6), Error);
  EXPECT_THROW(group_advantages({1, 2}, -2, AdvNorm::Std, 1e-6), Error);
  EXPECT_THROW(group_advantages({1, 2}, 2, AdvNorm::Std, -1e-6), Error);
  EXPECT_THROW(group_advantages({1, std::nan("")}, 2, AdvNorm::Std, 1e-6), Error);
  EXPECT_THROW(group_advantages({1, kInf}, 2, AdvNorm::None, 1e-6), Error);
  EXPECT_TRUE(group_advantages({}, 4, AdvNorm::Std, 1e-6).empty());
}

// ---- Names ----

TEST(GrpoNames, RoundTripAndErrorsListAcceptedNames) {
  for (AdvNorm v : {AdvNorm::Std, AdvNorm::None}) EXPECT_EQ(parse_adv_norm(name(v)), v);
  for (LossAgg v : kAggs) EXPECT_EQ(parse_loss_agg(name(v)), v);
  for (RolloutCorrection v : kCorrections) EXPECT_EQ(parse_rollout_correction(name(v)), v);
  EXPECT_STREQ(name(LossAgg::SeqMeanTokenSum), "seq-mean-token-sum");
  EXPECT_STREQ(name(RolloutCorrection::MIS), "mis");
  try {
    parse_loss_agg("token-sum");
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'token-sum'"), std::string::npos) << m;
    EXPECT_NE(m.find("token-mean, seq-mean-token-sum, seq-mean-token-mean"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_THROW(parse_adv_norm("Std"), Error);
  EXPECT_THROW(parse_rollout_correction("TIS"), Error);
}

// ---- Policy loss on a fixed batch: ratios on both sides of the range, both signs of A ----

struct Batch {
  Rows lp, lpo, lpr;
  std::vector<double> adv;
};

// Ratios 0.5 (below 0.8), 0.9 and 1.0 (inside), 1.5 (above 1.28); rollout ratios
// exp(lpo - lpr) 1, 0.3 (MIS rejects), 3 (TIS caps at 2, MIS rejects), 1.5.
Batch fixed_batch() {
  Batch b;
  const std::vector<double> ratios = {0.5, 0.9, 1.0, 1.5};
  const std::vector<double> rho = {1.0, 0.3, 3.0, 1.5};
  auto seq = [&](double a, std::vector<double> rs, std::vector<double> rh) {
    std::vector<float> lp, lpo, lpr;
    for (size_t t = 0; t < rs.size(); ++t) {
      const float old = -1.25f - 0.5f * static_cast<float>(t);
      lpo.push_back(old);
      lp.push_back(static_cast<float>(old + std::log(rs[t])));
      lpr.push_back(static_cast<float>(old - std::log(rh[t])));
    }
    b.lp.push_back(lp);
    b.lpo.push_back(lpo);
    b.lpr.push_back(lpr);
    b.adv.push_back(a);
  };
  seq(1.5, ratios, rho);
  seq(-0.7, ratios, {1.5, 1.0, 0.3, 3.0});
  seq(0.3, {1.1, 0.7}, {1.0, 1.2});
  seq(2.0, {}, {});
  seq(-1.0, {1.0, 2.0}, {3.0, 0.25});  // every token rejected under MIS
  seq(0.0, {0.5, 1.5}, {1.0, 1.0});    // A = 0: no gradient anywhere
  return b;
}

TEST(PolicyLoss, MatchesReferenceForEveryAggregationAndCorrection) {
  const Batch b = fixed_batch();
  for (LossAgg agg : kAggs) {
    for (RolloutCorrection corr : kCorrections) {
      PolicyLossConfig cfg;
      cfg.agg = agg;
      cfg.correction = corr;
      const PolicyLossResult res = policy_loss(b.lp, b.lpo, b.lpr, b.adv, cfg);
      const RefLoss ref = ref_policy_loss(b.lp, b.lpo, b.lpr, b.adv, cfg);
      SCOPED_TRACE(label(cfg));
      EXPECT_NEAR(res.loss, ref.loss, 1e-12 * std::max(1.0, std::abs(ref.loss)));
      ASSERT_EQ(res.weight.size(), b.lp.size());
      int64_t ref_clipped = 0;
      for (size_t i = 0; i < b.lp.size(); ++i) {
        ASSERT_EQ(res.weight[i].size(), b.lp[i].size());
        for (size_t t = 0; t < b.lp[i].size(); ++t) {
          const double g = ref.grad[i][t];
          ref_clipped += ref.zero_by_clip[i][t];
          if (g == 0) {
            EXPECT_EQ(res.weight[i][t], 0.0f) << i << "," << t;
          } else {
            EXPECT_NEAR(res.weight[i][t], g, 1e-7 * std::abs(g)) << i << "," << t;
          }
        }
      }
      EXPECT_EQ(res.tokens, 4 + 4 + 2 + 0 + 2 + 2);
      EXPECT_EQ(res.clipped, ref_clipped);
      EXPECT_GT(ref_clipped, 0);
      if (corr == RolloutCorrection::MIS) {
        EXPECT_EQ(res.masked, 2 + 2 + 0 + 0 + 2 + 0);
        EXPECT_DOUBLE_EQ(res.mask_frac, 6.0 / 14);
        EXPECT_DOUBLE_EQ(res.clip_frac, double(res.clipped) / 8);
      } else {
        EXPECT_EQ(res.masked, 0);
        EXPECT_DOUBLE_EQ(res.clip_frac, double(res.clipped) / 14);
      }
      EXPECT_NEAR(res.ratio_max, 2.0, 1e-6);
    }
  }
}

TEST(PolicyLoss, ClippedTokensHaveExactlyZeroWeight) {
  const Batch b = fixed_batch();
  PolicyLossConfig cfg;  // token-mean, no correction: 14 tokens
  const PolicyLossResult res = policy_loss(b.lp, b.lpo, b.lpr, b.adv, cfg);
  // A > 0: ratio 1.5 > 1.28 is clipped; ratio 0.5 < 0.8 keeps its gradient.
  EXPECT_EQ(res.weight[0][3], 0.0f);
  EXPECT_NEAR(res.weight[0][0], 1.5 * 0.5 / 14, 1e-7);
  EXPECT_NEAR(res.weight[0][1], 1.5 * 0.9 / 14, 1e-7);
  // A < 0: ratio 0.5 is clipped; ratio 1.5 keeps its gradient.
  EXPECT_EQ(res.weight[1][0], 0.0f);
  EXPECT_NEAR(res.weight[1][3], -0.7 * 1.5 / 14, 1e-7);
  // A = 0: nothing.
  EXPECT_EQ(res.weight[5][0], 0.0f);
  EXPECT_EQ(res.weight[5][1], 0.0f);
  // Sequence 4's ratio-2 token (A < 0, above the range) is active; sequence 0's
  // ratio-1.5 one (A > 0) and sequence 1's ratio-0.5 one (A < 0) are clipped.
  EXPECT_EQ(res.clipped, 2);
}

TEST(PolicyLoss, OnPolicyOnGridIsExactPolicyGradient) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> ulp(-6.0f, -0.01f);
  Rows lp;
  std::vector<double> adv = {0.75, -1.3, 2.0 / 3.0, 0.0, -0.2};
  const std::vector<int> lens = {5, 1, 3, 2, 0};
  for (int len : lens) {
    std::vector<float> row;
    for (int t = 0; t < len; ++t) row.push_back(ulp(rng));
    lp.push_back(row);
  }
  const double total = 11, seqs = 4;
  for (LossAgg agg : kAggs) {
    for (RolloutCorrection corr : kCorrections) {
      PolicyLossConfig cfg;
      cfg.agg = agg;
      cfg.correction = corr;
      SCOPED_TRACE(label(cfg));
      const PolicyLossResult res = policy_loss(lp, lp, lp, adv, cfg);
      EXPECT_EQ(res.ratio_mean, 1.0);
      EXPECT_EQ(res.ratio_max, 1.0);
      EXPECT_EQ(res.clipped, 0);
      EXPECT_EQ(res.masked, 0);
      double want_loss = 0;
      for (size_t i = 0; i < lp.size(); ++i) {
        double d = total;
        if (agg == LossAgg::SeqMeanTokenSum) d = seqs;
        if (agg == LossAgg::SeqMeanTokenMean) d = seqs * double(lens[i]);
        for (size_t t = 0; t < lp[i].size(); ++t) {
          EXPECT_EQ(res.weight[i][t], static_cast<float>(adv[i] / d)) << i << "," << t;
          want_loss -= adv[i] / d;
        }
      }
      EXPECT_NEAR(res.loss, want_loss, 1e-15);
    }
  }
}

TEST(PolicyLoss, WeightIsMinusFiniteDifferenceGradient) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 3; ++trial) {
    PolicyLossConfig base;
    Batch b;
    const int n = 6;
    for (int i = 0; i < n; ++i) {
      const int len = static_cast<int>(u(rng) * 7);  // 0..6
      std::vector<float> lp, lpo, lpr;
      for (int t = 0; t < len; ++t) {
        const float old = static_cast<float>(-5 + 4.9 * u(rng));
        double r;
        do {  // stay away from the clip boundaries
          r = std::exp(-0.6 + 1.2 * u(rng));
        } while (std::abs(r - (1 - base.clip_low)) < 0.02 || std::abs(r - (1 + base.clip_high)) < 0.02);
        lpo.push_back(old);
        lp.push_back(static_cast<float>(old + std::log(r)));
        lpr.push_back(static_cast<float>(old - 1.0 + 2.0 * u(rng)));
      }
      b.lp.push_back(lp);
      b.lpo.push_back(lpo);
      b.lpr.push_back(lpr);
      b.adv.push_back(-2 + 4 * u(rng));
    }
    for (LossAgg agg : kAggs) {
      for (RolloutCorrection corr : kCorrections) {
        PolicyLossConfig cfg;
        cfg.agg = agg;
        cfg.correction = corr;
        SCOPED_TRACE(label(cfg) + " trial " + std::to_string(trial));
        const PolicyLossResult res = policy_loss(b.lp, b.lpo, b.lpr, b.adv, cfg);
        for (size_t i = 0; i < b.lp.size(); ++i) {
          for (size_t t = 0; t < b.lp[i].size(); ++t) {
            Rows plus = b.lp, minus = b.lp;
            plus[i][t] += 1e-3f;
            minus[i][t] -= 1e-3f;
            const double h = double(plus[i][t]) - double(minus[i][t]);
            const double fd =
                (policy_loss(plus, b.lpo, b.lpr, b.adv, cfg).loss - policy_loss(minus, b.lpo, b.lpr, b.adv, cfg).loss) /
                h;
            EXPECT_NEAR(res.weight[i][t], -fd, 1e-6 + 1e-5 * std::abs(fd)) << i << "," << t;
          }
        }
      }
    }
  }
}

TEST(PolicyLoss, EmptyAndFullyRejectedBatchesGiveZero) {
  PolicyLossConfig cfg;
  const PolicyLossResult e = policy_loss({}, {}, {}, {}, cfg);
  EXPECT_EQ(e.loss, 0.0);
  EXPECT_EQ(e.tokens, 0);
  EXPECT_EQ(e.clip_frac, 0.0);
  cfg.correction = RolloutCorrection::MIS;
  for (LossAgg agg : kAggs) {
    cfg.agg = agg;
    const PolicyLossResult r = policy_loss({{-1.0f, -2.0f}}, {{-1.0f, -2.0f}}, {{-5.0f, 1.0f}}, {1.0}, cfg);
    EXPECT_EQ(r.loss, 0.0);
    EXPECT_EQ(r.masked, 2);
    EXPECT_EQ(r.mask_frac, 1.0);
    EXPECT_EQ(r.weight[0], (std::vector<float>{0.0f, 0.0f}));
  }
}

TEST(PolicyLoss, BadShapesAndValuesThrow) {
  PolicyLossConfig cfg;
  const Rows a = {{-1}, {-1, -2}, {-3}};
  const Rows bad = {{-1}, {-1, -2}, {-3, -4}};
  const std::vector<double> adv = {1, 0, -1};
  try {
    policy_loss(a, bad, {}, adv, cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(policy_loss(a, a, {}, {1, 0}, cfg), Error);
  EXPECT_THROW(policy_loss(a, Rows{{-1}, {-1, -2}}, {}, adv, cfg), Error);
  EXPECT_NO_THROW(policy_loss(a, a, {}, adv, cfg));
  cfg.correction = RolloutCorrection::TIS;
  EXPECT_THROW(policy_loss(a, a, {}, adv, cfg), Error);  // correction needs logp_rollout
  EXPECT_THROW(policy_loss(a, a, bad, adv, cfg), Error);
  Rows nan = a;
  nan[1][1] = std::nanf("");
  EXPECT_THROW(policy_loss(nan, a, a, adv, cfg), Error);
  EXPECT_THROW(policy_loss(a, a, nan, adv, cfg), Error);
  Rows inf = a;
  inf[0][0] = kNegInfF;
  EXPECT_THROW(policy_loss(a, inf, a, adv, cfg), Error);
  EXPECT_THROW(policy_loss(a, a, a, {1, std::nan(""), 0}, cfg), Error);
}

TEST(PolicyLoss, ConfigValidation) {
  PolicyLossConfig cfg;
  EXPECT_NO_THROW(cfg.validate());
  cfg.cap = 0.5;
  EXPECT_THROW(cfg.validate(), Error);
  cfg = {};
  cfg.clip_low = 1.0;
  EXPECT_THROW(cfg.validate(), Error);
  cfg = {};
  cfg.clip_high = -0.1;
  EXPECT_THROW(cfg.validate(), Error);
  cfg = {};
  cfg.cap = kInf;
  EXPECT_THROW(cfg.validate(), Error);
  cfg = {};
  cfg.cap = 1.0;
  cfg.clip_low = 0;
  cfg.clip_high = 0;
  EXPECT_NO_THROW(cfg.validate());
}

}  // namespace
}  // namespace mxrl
