// The experiments' statistics and measurements: bootstrap intervals, the line
// fit of the micro-batch sweep, and the matching measurement on a small
// random model (an on-grid sampler agrees bitwise, foreign kernels and other
// plans do not).
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/matching.h"
#include "experiments/train_sweep.h"
#include "testing/model_dir.h"
#include "testing/small_config.h"

namespace mxrl {
namespace {

std::vector<PromptSums> sums(const std::vector<std::pair<int64_t, double>>& tokens_kl) {
  std::vector<PromptSums> out;
  for (const auto& [n, kl] : tokens_kl) {
    PromptSums p;
    p.tokens = n, p.kl = kl;
    out.push_back(p);
  }
  return out;
}

TEST(Experiments, BootstrapMeanIsTokenWeightedAndItsIntervalHoldsIt) {
  const auto p = sums({{2, 0.2}, {4, 0.1}, {1, 0.7}, {3, 0.0}, {5, 0.5}});
  const Interval i = bootstrap_mean(p, &PromptSums::kl, 500, 7);
  EXPECT_DOUBLE_EQ(i.mean, 1.5 / 15);
  EXPECT_LE(i.lo, i.mean);
  EXPECT_GE(i.hi, i.mean);
  EXPECT_LT(i.lo, i.hi);
  // Same seed, same interval; every prompt at the same per-token value: a point.
  const Interval again = bootstrap_mean(p, &PromptSums::kl, 500, 7);
  EXPECT_EQ(i.lo, again.lo);
  EXPECT_EQ(i.hi, again.hi);
  const Interval flat = bootstrap_mean(sums({{2, 0.2}, {4, 0.4}, {1, 0.1}}), &PromptSums::kl, 200, 1);
  EXPECT_NEAR(flat.lo, 0.1, 1e-15);
  EXPECT_NEAR(flat.hi, 0.1, 1e-15);
}

TEST(Experiments, PairedBootstrapRatio) {
  const auto a = sums({{2, 0.2}, {4, 0.1}, {1, 0.7}, {3, 0.3}});
  // a against itself: exactly 1 in every resample.
  const Interval same = bootstrap_ratio(a, a, 300, 3);
  EXPECT_EQ(same.mean, 1.0);
  EXPECT_EQ(same.lo, 1.0);
  EXPECT_EQ(same.hi, 1.0);
  // Twice a, prompt by prompt: exactly 2 (pairing cancels the prompt noise).
  auto b = a;
  for (PromptSums& p : b) p.kl *= 2;
  const Interval two = bootstrap_ratio(b, a, 300, 3);
  EXPECT_NEAR(two.lo, 2.0, 1e-12);
  EXPECT_NEAR(two.hi, 2.0, 1e-12);
  // A zero denominator has no ratio.
  const Interval none = bootstrap_ratio(a, sums({{2, 0}, {4, 0}, {1, 0}, {3, 0}}), 100, 3);
  EXPECT_TRUE(std::isnan(none.mean));
  EXPECT_TRUE(std::isnan(none.lo));
}

TEST(Experiments, LineFitRecoversALine) {
  const Line l = fit_line({512, 1024, 2048, 4096},
                          {0.01 + 512 * 2e-5, 0.01 + 1024 * 2e-5, 0.01 + 2048 * 2e-5, 0.01 + 4096 * 2e-5});
  EXPECT_NEAR(l.a, 0.01, 1e-12);
  EXPECT_NEAR(l.b, 2e-5, 1e-15);
  EXPECT_NEAR(l.r2, 1.0, 1e-12);
}

struct Totals {
  int64_t tokens = 0, unequal = 0;
  double kl = 0;
};
Totals total(const std::vector<PromptSums>& p) {
  Totals t;
  for (const PromptSums& q : p) t.tokens += q.tokens, t.unequal += q.unequal, t.kl += q.kl;
  return t;
}

TEST(Experiments, MatchingOnGridIsExactAndEverythingElseIsNot) {
  for (bool moe : {false, true}) {
    const std::string dir = test::make_model_dir(moe ? "exp_moe" : "exp_dense", small_test_config(moe));
    MatchingConfig cfg;
    cfg.task = "addition:digits=2";
    cfg.probe_prompts = 6;
    cfg.samples_per_prompt = 2;
    cfg.max_new_tokens = 6;
    const MatchSetup on_grid{"mxfp8", "mxfp8", "mxfp8", SyncMode::Ship};
    const Totals shared = total(measure_matching(dir, on_grid, cfg, 0));
    ASSERT_GT(shared.tokens, 0);
    EXPECT_EQ(shared.unequal, 0) << "moe " << moe;
    EXPECT_EQ(shared.kl, 0.0);
    // Requantizing the BF16 copies under the learner's own plan lands on the same codes.
    const Totals rq = total(measure_matching(dir, {"rq", "mxfp8", "mxfp8", SyncMode::Requantize}, cfg, 0));
    EXPECT_EQ(rq.unequal, 0);
    const Totals foreign = total(measure_matching(dir, on_grid, cfg, 4));
    EXPECT_GT(foreign.unequal, 0) << "moe " << moe;
    EXPECT_GT(foreign.kl, 0.0);
    const Totals bf16 = total(measure_matching(dir, {"bf16", "mxfp8", "bf16", SyncMode::Ship}, cfg, 0));
    EXPECT_GT(bf16.unequal, 0);
    EXPECT_GT(bf16.kl, 0.0);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace mxrl
