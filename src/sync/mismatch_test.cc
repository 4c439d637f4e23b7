// The mismatch metrics against hand-computed values.
#include "sync/mismatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "util/error.h"

namespace mxrl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// ---- Exact KL and entropy ----

TEST(ExactKl, IdenticalRowsAreExactlyZero) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0, 4);
  std::vector<float> row(1000);
  for (float& x : row) x = nd(rng);
  row[17] = kNegInfF;
  for (double temp : {1.0, 0.6, 1.7}) EXPECT_EQ(exact_kl(row.data(), row.data(), 1000, temp), 0.0);
}

TEST(ExactKl, HandComputedThreeTokenExample) {
  const float ln2 = static_cast<float>(std::log(2.0));
  const float s[3] = {ln2, 0, 0};  // p_s = (1/2, 1/4, 1/4)
  const float l[3] = {0, ln2, 0};  // p_l = (1/4, 1/2, 1/4)
  // 1/2 ln 2 + 1/4 ln(1/2) = ln 2 / 4
  EXPECT_NEAR(exact_kl(s, l, 3, 1.0), std::log(2.0) / 4, 1e-7);
  // T = 2: p_s = (sqrt2, 1, 1) / (2 + sqrt2), p_l = (1, sqrt2, 1) / (2 + sqrt2);
  // KL = (sqrt2 - 1) / (2 + sqrt2) * ln(sqrt2).
  const double r2 = std::sqrt(2.0);
  EXPECT_NEAR(exact_kl(s, l, 3, 2.0), (r2 - 1) / (2 + r2) * std::log(r2), 1e-7);
  // Shifting every logit of a row changes nothing.
  const float s_shift[3] = {ln2 + 10, 10, 10};
  EXPECT_NEAR(exact_kl(s_shift, l, 3, 1.0), std::log(2.0) / 4, 1e-6);
}

TEST(ExactKl, NonNegativeOnRandomRows) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0, 3);
  std::normal_distribution<float> small(0, 1e-4f);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> a(64), b(64);
    for (int v = 0; v < 64; ++v) {
      a[v] = nd(rng);
      b[v] = trial % 2 ? a[v] + small(rng) : nd(rng);  // nearly equal rows, too
    }
    const double kl = exact_kl(a.data(), b.data(), 64, 1.0);
    EXPECT_GE(kl, 0.0);
    EXPECT_TRUE(std::isfinite(kl));
  }
}

TEST(ExactKl, HandlesMinusInfinityLogits) {
  const float s[3] = {0, kNegInfF, 0};  // p_s = (1/2, 0, 1/2)
  const float l[3] = {0, 0, 0};         // uniform
  // 2 * 1/2 * ln(3/2)
  EXPECT_NEAR(exact_kl(s, l, 3, 1.0), std::log(1.5), 1e-12);
  // The learner gives 0 where the sampler does not: infinite.
  EXPECT_EQ(exact_kl(l, s, 3, 1.0), kInf);
  // Both -inf at the same place: that token contributes nothing.
  EXPECT_EQ(exact_kl(s, s, 3, 1.0), 0.0);
  const float all_inf[2] = {kNegInfF, kNegInfF};
  const float ok[2] = {0, 0};
  EXPECT_THROW(exact_kl(all_inf, ok, 2, 1.0), Error);
  const float pos_inf[2] = {std::numeric_limits<float>::infinity(), 0};
  EXPECT_THROW(exact_kl(pos_inf, ok, 2, 1.0), Error);
  const float nan[2] = {std::nanf(""), 0};
  EXPECT_THROW(exact_kl(ok, nan, 2, 1.0), Error);
  EXPECT_THROW(exact_kl(ok, ok, 2, 0.0), Error);
  EXPECT_THROW(exact_kl(ok, ok, 0, 1.0), Error);
}

TEST(Entropy, UniformAndOneHot) {
  std::vector<float> uni(50, 3.5f);
  EXPECT_NEAR(entropy(uni.data(), 50, 1.0), std::log(50.0), 1e-12);
  EXPECT_NEAR(entropy(uni.data(), 50, 0.3), std::log(50.0), 1e-12);
  const float one_hot[3] = {kNegInfF, 1.0f, kNegInfF};
  EXPECT_EQ(entropy(one_hot, 3, 1.0), 0.0);
  const float half[3] = {0, kNegInfF, 0};
  EXPECT_NEAR(entropy(half, 3, 1.0), std::log(2.0), 1e-12);
}

// ---- Mismatch statistics ----

TEST(MismatchStats, KnownInputs) {
  const double ln2 = std::log(2.0);
  MismatchStats s;
  s.add(-1.0, -1.0, 0.0);            // D = 0
  s.add(-1.0 + ln2, -1.0);           // D = ln 2, no KL
  s.add(-3.0 - ln2, -3.0, 0.25);     // D = -ln 2
  s.add(-0.5, -0.5 - 2 * ln2, 1.0);  // D = ln 4
  // w = e^D = (1, 2, 1/2, 4)
  EXPECT_EQ(s.tokens(), 4);
  EXPECT_EQ(s.kl_tokens(), 3);
  EXPECT_DOUBLE_EQ(s.kl_mean(), 1.25 / 3);
  EXPECT_DOUBLE_EQ(s.kl_max(), 1.0);
  EXPECT_NEAR(s.k1(), -ln2 / 2, 1e-15);
  EXPECT_NEAR(s.k3(), (0 + (2 - 1 - ln2) + (0.5 - 1 + ln2) + (4 - 1 - 2 * ln2)) / 4, 1e-15);
  EXPECT_NEAR(s.abs_dlogp_mean(), ln2, 1e-15);
  EXPECT_NEAR(s.abs_dlogp_max(), 2 * ln2, 1e-15);
  EXPECT_NEAR(s.token_mult_prob_error(), (1 + 2 + 2 + 4) / 4.0, 1e-15);
  EXPECT_NEAR(s.is_mean(), 7.5 / 4, 1e-15);
  EXPECT_NEAR(s.is_max(), 4.0, 1e-15);
  EXPECT_NEAR(s.is_min(), 0.5, 1e-15);
  EXPECT_NEAR(s.is_ess(), 7.5 * 7.5 / (4 * 21.25), 1e-15);
  EXPECT_FALSE(s.bitwise_equal());

  const nlohmann::json j = s.to_json();
  for (const char* key : {"tokens", "kl_tokens", "kl_mean", "kl_max", "k1", "k3", "abs_dlogp_mean", "abs_dlogp_max",
                          "token_mult_prob_error", "is_mean", "is_max", "is_min", "is_ess", "bitwise_equal"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["tokens"], 4);
  EXPECT_EQ(j["bitwise_equal"], false);
  EXPECT_DOUBLE_EQ(j["is_ess"].get<double>(), s.is_ess());
}

TEST(MismatchStats, IdenticalLogProbsAreBitwiseEqual) {
  MismatchStats s;
  for (double lp : {-0.5, -2.25, -9.0}) s.add(lp, lp);
  EXPECT_TRUE(s.bitwise_equal());
  EXPECT_EQ(s.k1(), 0.0);
  EXPECT_EQ(s.k3(), 0.0);
  EXPECT_EQ(s.abs_dlogp_max(), 0.0);
  EXPECT_EQ(s.token_mult_prob_error(), 1.0);
  EXPECT_EQ(s.is_ess(), 1.0);
  const nlohmann::json j = s.to_json();
  EXPECT_TRUE(j["kl_mean"].is_null());  // no KL was given
  EXPECT_TRUE(j["kl_max"].is_null());
  EXPECT_EQ(j["bitwise_equal"], true);
  s.add(-1.0, std::nextafter(-1.0, 0.0));
  EXPECT_FALSE(s.bitwise_equal());
}

TEST(MismatchStats, EmptyIsNullAndMergeMatchesSequentialAdds) {
  MismatchStats empty;
  const nlohmann::json j = empty.to_json();
  EXPECT_EQ(j["tokens"], 0);
  EXPECT_TRUE(j["k1"].is_null());
  EXPECT_TRUE(j["bitwise_equal"].is_null());
  EXPECT_TRUE(std::isnan(empty.is_mean()));

  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-4, -0.1);
  MismatchStats all, a, b;
  for (int i = 0; i < 40; ++i) {
    const double l = u(rng), s = u(rng), kl = i % 3 ? std::abs(l - s) : std::nan("");
    all.add(l, s, kl);
    (i < 15 ? a : b).add(l, s, kl);
  }
  a.merge(b);
  a.merge(empty);
  EXPECT_EQ(a.tokens(), all.tokens());
  EXPECT_EQ(a.kl_tokens(), all.kl_tokens());
  EXPECT_NEAR(a.k3(), all.k3(), 1e-12);
  EXPECT_NEAR(a.kl_mean(), all.kl_mean(), 1e-12);
  EXPECT_EQ(a.kl_max(), all.kl_max());
  EXPECT_EQ(a.is_max(), all.is_max());
  EXPECT_EQ(a.is_min(), all.is_min());
  EXPECT_NEAR(a.is_ess(), all.is_ess(), 1e-12);
  MismatchStats c;
  c.merge(all);
  EXPECT_EQ(c.to_json(), all.to_json());
}

TEST(MismatchStats, BadInputsThrow) {
  MismatchStats s;
  EXPECT_THROW(s.add(std::nan(""), -1.0), Error);
  EXPECT_THROW(s.add(-1.0, -kInf), Error);
  EXPECT_THROW(s.add(-1.0, -1.0, -0.1), Error);
  EXPECT_EQ(s.tokens(), 0);
  EXPECT_NO_THROW(s.add(-1.0, -1.0, kInf));
  EXPECT_EQ(s.kl_max(), kInf);
}

}  // namespace
}  // namespace mxrl
