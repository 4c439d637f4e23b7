#include "sampler/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/ops/ops.h"
#include "testing/random.h"
#include "util/error.h"

namespace mxrl {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float gather(const std::vector<float>& x, int32_t token) {
  float lp;
  log_softmax_gather(&lp, x.data(), &token, 1, static_cast<int64_t>(x.size()));
  return lp;
}

SamplingParams params(float t, float top_p = 1.0f, int64_t top_k = 0) {
  SamplingParams p;
  p.temperature = t;
  p.top_p = top_p;
  p.top_k = top_k;
  return p;
}

// The documented semantics, written the plain way (a full stable sort every time).
int32_t reference_sample(const std::vector<float>& logits, const SamplingParams& p, double u) {
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<float> x(logits);
  if (p.temperature != 1.0f)
    for (auto& v : x) v = v / p.temperature;
  std::vector<float> q(x);
  softmax_forward(q.data(), 1, n);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return q[a] > q[b]; });
  const auto sum_by_id = [&](std::vector<int32_t> set) {
    std::sort(set.begin(), set.end());
    double s = 0.0;
    for (int32_t i : set) s += double(q[i]);
    return s;
  };
  const size_t c = (p.top_k > 0 && p.top_k < n) ? size_t(p.top_k) : size_t(n);
  std::vector<int32_t> kept(order.begin(), order.begin() + c);
  if (p.top_p < 1.0f) {
    const double target = double(p.top_p) * sum_by_id(kept);
    double acc = 0.0;
    for (size_t j = 0; j < c; ++j) {
      acc += double(q[kept[j]]);
      if (acc >= target) {
        kept.resize(j + 1);
        break;
      }
    }
  }
  std::sort(kept.begin(), kept.end());
  const double wk = sum_by_id(kept);
  double acc = 0.0;
  int32_t last = -1;
  for (int32_t i : kept) {
    if (q[i] == 0.0f) continue;
    acc += double(q[i]);
    if (acc > u * wk) return i;
    last = i;
  }
  return last;
}

// softmax(logits / T) in FP64, truncated to the top_k / top_p set of the
// probability order (ties: lower id) and renormalized.
std::vector<double> expected_distribution(const std::vector<float>& logits, double t, double top_p, int64_t top_k) {
  const size_t n = logits.size();
  std::vector<double> q(n);
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, double(v) / t);
  double z = 0.0;
  for (size_t i = 0; i < n; ++i) z += q[i] = std::exp(double(logits[i]) / t - mx);
  for (auto& v : q) v /= z;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return q[a] > q[b]; });
  size_t c = top_k > 0 ? std::min(n, size_t(top_k)) : n;
  double zc = 0.0;
  for (size_t j = 0; j < c; ++j) zc += q[order[j]];
  size_t kept = c;
  double acc = 0.0;
  for (size_t j = 0; j < c; ++j) {
    acc += q[order[j]] / zc;
    if (acc >= top_p - 1e-12) {
      kept = j + 1;
      break;
    }
  }
  std::vector<double> out(n, 0.0);
  double zk = 0.0;
  for (size_t j = 0; j < kept; ++j) zk += q[order[j]];
  for (size_t j = 0; j < kept; ++j) out[order[j]] = q[order[j]] / zk;
  return out;
}

// 20,000 draws, each token's frequency within 5 standard errors; tokens with
// probability 0 never appear.
void expect_frequencies(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed) {
  const int draws = 20000;
  const auto expected = expected_distribution(logits, p.temperature, p.top_p, p.top_k);
  std::vector<int> count(logits.size(), 0);
  std::vector<float> scratch;
  for (int i = 0; i < draws; ++i) {
    const double u = sample_uniform(seed, 3, uint64_t(i), 0);
    const Sampled s = sample_token(logits.data(), int64_t(logits.size()), p, u, scratch);
    ASSERT_GE(s.token, 0);
    ASSERT_LT(s.token, int32_t(logits.size()));
    ++count[s.token];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double q = expected[i];
    const double f = double(count[i]) / draws;
    if (q == 0.0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " is outside the kept set";
    } else {
      const double se = std::sqrt(q * (1.0 - q) / draws);
      EXPECT_NEAR(f, q, 5.0 * se + 1e-12)
          << "token " << i << " T=" << p.temperature << " top_p=" << p.top_p << " top_k=" << p.top_k;
    }
  }
}

TEST(SamplingParams, Validation) {
  EXPECT_NO_THROW(params(0.0f).validate());
  EXPECT_NO_THROW(params(1.0f, 1.0f, 0).validate());
  EXPECT_NO_THROW(params(0.7f, 0.01f, 5).validate());
  EXPECT_THROW(params(-0.5f).validate(), Error);
  EXPECT_THROW(params(NAN).validate(), Error);
  EXPECT_THROW(params(INFINITY).validate(), Error);
  EXPECT_THROW(params(1.0f, 0.0f).validate(), Error);
  EXPECT_THROW(params(1.0f, -0.1f).validate(), Error);
  EXPECT_THROW(params(1.0f, 1.5f).validate(), Error);
  EXPECT_THROW(params(1.0f, NAN).validate(), Error);
  EXPECT_THROW(params(1.0f, 1.0f, -1).validate(), Error);
  try {
    params(-2.0f).validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  try {
    params(1.0f, 2.0f).validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_p"), std::string::npos) << e.what();
  }
  try {
    params(1.0f, 1.0f, -3).validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top_k"), std::string::npos) << e.what();
  }
}

TEST(SampleToken, RejectsBadInputs) {
  std::vector<float> scratch;
  const std::vector<float> ok = {1.0f, 2.0f, 3.0f};
  EXPECT_THROW(sample_token(ok.data(), 3, params(-1.0f), 0.5, scratch), Error);
  EXPECT_THROW(sample_token(ok.data(), 0, params(1.0f), 0.5, scratch), Error);
  EXPECT_THROW(sample_token(ok.data(), 3, params(1.0f), 1.0, scratch), Error);
  EXPECT_THROW(sample_token(ok.data(), 3, params(1.0f), -0.1, scratch), Error);
  EXPECT_THROW(sample_token(ok.data(), 3, params(1.0f), NAN, scratch), Error);
  const std::vector<float> with_nan = {1.0f, NAN, 3.0f};
  EXPECT_THROW(sample_token(with_nan.data(), 3, params(1.0f), 0.5, scratch), Error);
  EXPECT_THROW(sample_token(with_nan.data(), 3, params(0.0f), 0.5, scratch), Error);
  const std::vector<float> with_inf = {1.0f, INFINITY, 3.0f};
  EXPECT_THROW(sample_token(with_inf.data(), 3, params(0.5f), 0.5, scratch), Error);
  const std::vector<float> all_masked = {-INFINITY, -INFINITY};
  EXPECT_THROW(sample_token(all_masked.data(), 2, params(1.0f), 0.5, scratch), Error);
  const std::vector<float> big = {3e38f, 1.0f};
  EXPECT_THROW(sample_token(big.data(), 2, params(1e-3f), 0.5, scratch), Error);  // overflows to +inf
  EXPECT_THROW(token_logprob(ok.data(), 3, 1.0f, 3, scratch), Error);
  EXPECT_THROW(token_logprob(ok.data(), 3, 1.0f, -1, scratch), Error);
  EXPECT_THROW(token_logprob(ok.data(), 3, -1.0f, 0, scratch), Error);
}

TEST(SampleUniform, DeterministicIndependentStreamsInRange) {
  EXPECT_EQ(sample_uniform(1, 2, 3, 4), sample_uniform(1, 2, 3, 4));
  const double base = sample_uniform(1, 2, 3, 4);
  EXPECT_NE(base, sample_uniform(0, 2, 3, 4));
  EXPECT_NE(base, sample_uniform(1, 1, 3, 4));
  EXPECT_NE(base, sample_uniform(1, 2, 2, 4));
  EXPECT_NE(base, sample_uniform(1, 2, 3, 5));
  // Permuted counters give other values (each counter has its own role).
  EXPECT_NE(sample_uniform(0, 1, 2, 3), sample_uniform(0, 2, 1, 3));
  EXPECT_NE(sample_uniform(0, 1, 2, 3), sample_uniform(0, 1, 3, 2));

  // Whole streams differ: over 64 steps, different sample / request / seed
  // never coincide with the reference stream.
  for (uint64_t step = 0; step < 64; ++step) {
    const double r = sample_uniform(7, 11, 0, step);
    EXPECT_NE(r, sample_uniform(7, 11, 1, step));
    EXPECT_NE(r, sample_uniform(7, 12, 0, step));
    EXPECT_NE(r, sample_uniform(8, 11, 0, step));
    EXPECT_NE(r, sample_uniform(7, 11, 0, step + 1));
  }

  std::set<double> seen;
  double sum = 0.0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = sample_uniform(uint64_t(i % 7), uint64_t(i % 13), uint64_t(i), uint64_t(i % 5));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    EXPECT_EQ(u, std::ldexp(std::floor(std::ldexp(u, 53)), -53));  // 53 random bits
    sum += u;
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), size_t(n));
  EXPECT_NEAR(sum / n, 0.5, 5.0 * std::sqrt(1.0 / 12.0 / n));
}

TEST(SampleToken, GreedyPicksArgmaxLowestIdOnTies) {
  std::vector<float> scratch;
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  for (double u : {0.0, 0.3, 0.999}) {
    for (int64_t k : {0, 1, 3}) {
      const Sampled s = sample_token(logits.data(), 5, params(0.0f, 0.5f, k), u, scratch);
      EXPECT_EQ(s.token, 1);
      EXPECT_EQ(bits(s.logprob), bits(gather(logits, 1)));  // temperature 1
    }
  }
  const std::vector<float> masked = {-INFINITY, -INFINITY, -2.0f};
  EXPECT_EQ(sample_token(masked.data(), 3, params(0.0f), 0.0, scratch).token, 2);
  EXPECT_EQ(bits(token_logprob(logits.data(), 5, 0.0f, 3, scratch)), bits(gather(logits, 3)));
}

TEST(SampleToken, TemperatureOneLogprobIsBitwiseTheScorerValue) {
  std::vector<float> scratch;
  const auto logits = test::randn(1000, 5, 4.0f);
  for (int i = 0; i < 200; ++i) {
    const SamplingParams p = params(1.0f, i % 3 == 0 ? 0.9f : 1.0f, i % 4 == 0 ? 20 : 0);
    const Sampled s = sample_token(logits.data(), 1000, p, sample_uniform(1, 0, 0, uint64_t(i)), scratch);
    ASSERT_EQ(bits(s.logprob), bits(gather(logits, s.token)));
    ASSERT_EQ(bits(token_logprob(logits.data(), 1000, 1.0f, s.token, scratch)), bits(s.logprob));
  }
}

TEST(SampleToken, LogprobAtTemperatureIsLogSoftmaxOfDividedLogits) {
  std::vector<float> scratch;
  const int64_t n = 777;
  const auto logits = test::randn(n, 9, 3.0f);
  for (const float t : {0.7f, 1.3f, 0.05f}) {
    std::vector<float> x(logits);
    for (auto& v : x) v = v / t;  // the same division
    std::vector<float> lsm(n);
    log_softmax_forward(lsm.data(), x.data(), 1, n);
    for (int i = 0; i < 100; ++i) {
      const SamplingParams p = params(t, i % 2 ? 0.8f : 1.0f, i % 5 == 0 ? 7 : 0);
      const Sampled s = sample_token(logits.data(), n, p, sample_uniform(2, 1, 0, uint64_t(i)), scratch);
      ASSERT_EQ(bits(s.logprob), bits(lsm[s.token])) << "T=" << t;
      ASSERT_EQ(bits(s.logprob), bits(gather(x, s.token)));
      ASSERT_EQ(bits(token_logprob(logits.data(), n, t, s.token, scratch)), bits(s.logprob));
    }
    // token_logprob for tokens that were not sampled too.
    for (int32_t tok : {0, 100, int32_t(n - 1)})
      EXPECT_EQ(bits(token_logprob(logits.data(), n, t, tok, scratch)), bits(lsm[tok]));
  }
}

TEST(SampleToken, FrequenciesMatchSoftmaxAtTemperature) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  expect_frequencies(logits, params(1.0f), 1);
  expect_frequencies(logits, params(0.7f), 2);
  expect_frequencies(logits, params(2.0f), 3);
}

TEST(SampleToken, FrequenciesMatchTruncatedDistributions) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  expect_frequencies(logits, params(1.0f, 1.0f, 3), 4);   // top-k: {1, 4, 0}
  expect_frequencies(logits, params(0.7f, 1.0f, 2), 5);   // {1, 4}
  expect_frequencies(logits, params(1.0f, 0.75f, 0), 6);  // top-p
  expect_frequencies(logits, params(1.3f, 0.5f, 0), 7);
  expect_frequencies(logits, params(1.0f, 0.6f, 4), 8);   // top-k then top-p over the top-k mass
  expect_frequencies(logits, params(1.0f, 0.01f, 0), 9);  // only the argmax survives
  // Check the kept sets are the ones intended above (none of them at a boundary).
  const auto q = expected_distribution(logits, 1.0, 0.75, 0);
  EXPECT_EQ(std::count_if(q.begin(), q.end(), [](double v) { return v > 0; }), 3);
}

TEST(SampleToken, MaskedTokensNeverDrawn) {
  const std::vector<float> logits = {1.0f, -INFINITY, 0.5f, -INFINITY, 0.0f, 2.0f};
  expect_frequencies(logits, params(1.0f), 10);
  expect_frequencies(logits, params(0.9f, 0.9f, 0), 11);
  expect_frequencies(logits, params(1.0f, 1.0f, 5), 12);  // top_k larger than the unmasked tokens
}

TEST(SampleToken, TiesResolvedByLowerId) {
  std::vector<float> scratch;
  const std::vector<float> logits = {2.0f, 5.0f, 5.0f, 1.0f, 5.0f};
  for (int i = 0; i < 500; ++i) {
    const double u = sample_uniform(3, 0, 0, uint64_t(i));
    EXPECT_EQ(sample_token(logits.data(), 5, params(1.0f, 1.0f, 1), u, scratch).token, 1);
    EXPECT_EQ(sample_token(logits.data(), 5, params(0.8f, 0.3f, 0), u, scratch).token, 1);
    const int32_t t2 = sample_token(logits.data(), 5, params(1.0f, 1.0f, 2), u, scratch).token;
    EXPECT_TRUE(t2 == 1 || t2 == 2) << t2;
  }
  expect_frequencies(logits, params(1.0f, 1.0f, 2), 13);  // {1, 2}, each 1/2
  expect_frequencies(logits, params(1.0f, 0.5f, 0), 14);  // {1, 2}

  // A flat distribution: the threshold search keeps the lowest ids.
  const std::vector<float> flat(1000, 0.25f);
  for (int i = 0; i < 200; ++i) {
    const double u = sample_uniform(4, 0, 0, uint64_t(i));
    const int32_t t = sample_token(flat.data(), 1000, params(1.0f, 0.125f, 0), u, scratch).token;
    EXPECT_LT(t, 125);
    EXPECT_EQ(t, int32_t(u * 125));  // inverse CDF over 125 equal weights, in id order
  }
}

TEST(SampleToken, AgreesWithTheReferenceSemantics) {
  std::vector<float> scratch;
  struct Case {
    float t, top_p;
    int64_t top_k;
  };
  const Case cases[] = {{1.0f, 1.0f, 0},  {0.7f, 1.0f, 0},  {1.0f, 0.9f, 0},    {0.6f, 0.5f, 0},
                        {1.0f, 0.99f, 0}, {1.0f, 1.0f, 1},  {1.0f, 1.0f, 5},    {1.2f, 1.0f, 40},
                        {1.0f, 0.7f, 10}, {0.9f, 0.95f, 3}, {1.0f, 0.9999f, 0}, {1.0f, 1.0f, 100000}};
  for (uint32_t seed = 0; seed < 6; ++seed) {
    const int64_t n = seed < 3 ? 64 : 3000;
    // Wide spreads make weights underflow to 0; rounding to halves makes ties.
    auto logits = test::randn(n, 100 + seed, seed % 3 == 0 ? 2.0f : (seed % 3 == 1 ? 300.0f : 8.0f));
    if (seed % 2) {
      for (auto& v : logits) v = std::round(v * 2.0f) / 2.0f;
    }
    if (seed == 4) logits[7] = logits[9] = -INFINITY;
    for (const Case& c : cases) {
      const SamplingParams p = params(c.t, c.top_p, c.top_k);
      for (int i = 0; i < 60; ++i) {
        const double u = i == 0 ? 0.0 : (i == 1 ? 1.0 - 0x1p-53 : sample_uniform(seed, 0, 0, uint64_t(i)));
        const Sampled s = sample_token(logits.data(), n, p, u, scratch);
        ASSERT_EQ(s.token, reference_sample(logits, p, u))
            << "seed " << seed << " T=" << c.t << " top_p=" << c.top_p << " top_k=" << c.top_k << " u=" << u;
      }
    }
  }
}

TEST(SampleToken, QwenSizedVocabulary) {
  const int64_t n = 151936;
  std::vector<float> scratch;
  auto logits = test::randn(n, 42, 2.5f);
  logits[123456] = 14.0f;  // a peaked distribution, as an LM's
  logits[77] = 12.5f;
  const SamplingParams ps[] = {
      params(1.0f), params(0.7f),      params(1.0f, 0.9f), params(1.0f, 1.0f, 50), params(0.8f, 0.95f, 1000),
      params(0.0f), params(1.0f, 0.3f)};
  for (const auto& p : ps) {
    for (int i = 0; i < 8; ++i) {
      const double u = sample_uniform(5, 9, uint64_t(i), 0);
      const Sampled s = sample_token(logits.data(), n, p, u, scratch);
      ASSERT_GE(s.token, 0);
      ASSERT_LT(s.token, n);
      ASSERT_EQ(s.token, p.temperature == 0.0f ? 123456 : reference_sample(logits, p, u));
      ASSERT_TRUE(std::isfinite(s.logprob));
      ASSERT_EQ(bits(s.logprob), bits(token_logprob(logits.data(), n, p.temperature, s.token, scratch)));
    }
  }
  // Flat random logits: most of the vocabulary is needed for top_p = 0.9.
  const auto flat = test::randn(n, 43, 0.5f);
  for (int i = 0; i < 4; ++i) {
    const double u = sample_uniform(6, 0, uint64_t(i), 0);
    const SamplingParams p = params(1.0f, 0.9f);
    ASSERT_EQ(sample_token(flat.data(), n, p, u, scratch).token, reference_sample(flat, p, u));
  }
}

}  // namespace
}  // namespace mxrl
