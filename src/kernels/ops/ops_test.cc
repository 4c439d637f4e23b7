#include "kernels/ops/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ops/math.h"
#include "kernels/ops/ops_kernels.h"
#include "numerics/formats.h"
#include "testing/kv_layout.h"

namespace mxrl {
namespace {

int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    const int32_t i = static_cast<int32_t>(f32_bits(f));
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

TEST(Math, ExpIsWithinTwoUlpOfCorrectlyRounded) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-103.0f, 88.7f);
  int64_t worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 1000 ? -87.0f + i * 0.175f : u(rng);
    const float ref = static_cast<float>(std::exp(static_cast<double>(x)));
    if (ref < 0x1p-126f) continue;  // subnormal results: checked separately
    worst = std::max(worst, ulp_distance(exp_f(x), ref));
  }
  EXPECT_LE(worst, 2);
  EXPECT_EQ(exp_f(0.0f), 1.0f);
  EXPECT_EQ(exp_f(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f(INFINITY), INFINITY);
  EXPECT_EQ(exp_f(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f(NAN)));
  EXPECT_NEAR(exp_f(-100.0f), std::exp(-100.0), 1e-45);  // subnormal, not flushed
}

TEST(Math, CanonicalSumFollowsTheLaneTree) {
  std::vector<float> x(37);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + std::ldexp(1.0f, -static_cast<int>(i % 24));
  float lanes[16] = {};
  for (size_t i = 0; i < x.size(); ++i) lanes[i % 16] += x[i];
  float l8[8], l4[4], l2[2];
  for (int i = 0; i < 8; ++i) l8[i] = lanes[i] + lanes[i + 8];
  for (int i = 0; i < 4; ++i) l4[i] = l8[i] + l8[i + 4];
  for (int i = 0; i < 2; ++i) l2[i] = l4[i] + l4[i + 2];
  EXPECT_EQ(f32_bits(sum_canonical(x.data(), 37)), f32_bits(l2[0] + l2[1]));
  EXPECT_EQ(sum_canonical(x.data(), 0), 0.0f);
}

TEST(Ops, RmsNormMatchesDoubleReference) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0, 3);
  const int64_t rows = 5, dim = 96;
  std::vector<float> x(rows * dim), w(dim), y(rows * dim);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = 1 + nd(rng) * 0.1f;
  rmsnorm_forward(y.data(), x.data(), w.data(), rows, dim, 1e-6f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i)
      EXPECT_NEAR(y[r * dim + i], w[i] * x[r * dim + i] * inv, 1e-5 * std::fabs(y[r * dim + i]) + 1e-7);
  }
}

TEST(Ops, RopeRotatesPairsAndIsIdentityAtZero) {
  const RopeTable t = RopeTable::make(32, 10000.0);
  EXPECT_EQ(t.inv_freq[0], 1.0f);
  std::vector<float> x(2 * 32), x0;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i));
  x0 = x;
  rope_forward(x.data(), 2, 0, t);
  EXPECT_EQ(x, x0);
  rope_forward(x.data(), 2, 7, t);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 16; ++i) {
      const double a = 7.0 * t.inv_freq[i];
      const double x1 = x0[h * 32 + i], x2 = x0[h * 32 + i + 16];
      EXPECT_NEAR(x[h * 32 + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-6);
      EXPECT_NEAR(x[h * 32 + i + 16], x2 * std::cos(a) + x1 * std::sin(a), 1e-6);
    }
}

TEST(Ops, AttentionMatchesNaiveSoftmaxWithGroupedHeads) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  const int64_t heads = 4, kvh = 2, hd = 8, npos = 11, stride = kvh * hd;
  std::vector<float> q(heads * hd), k(npos * stride), v(npos * stride), out(heads * hd), scores(npos);
  for (auto* b : {&q, &k, &v})
    for (auto& x : *b) x = nd(rng);
  const float scale = 1 / std::sqrt(float(hd));
  attention_forward(out.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh, hd, scale, scores.data());
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / 2;
    std::vector<double> p(npos);
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < npos; ++j) {
      double s = 0;
      for (int64_t d = 0; d < hd; ++d) s += double(q[h * hd + d]) * k[j * stride + g * hd + d];
      p[j] = s * scale;
      mx = std::max(mx, p[j]);
    }
    for (auto& x : p) sum += (x = std::exp(x - mx));
    for (int64_t d = 0; d < hd; ++d) {
      double o = 0;
      for (int64_t j = 0; j < npos; ++j) o += p[j] / sum * v[j * stride + g * hd + d];
      EXPECT_NEAR(out[h * hd + d], o, 1e-5);
    }
  }
}

TEST(Ops, LogSoftmaxAndGatherAgree) {
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, -1.0f, 0.5f, 0.25f};
  std::vector<float> full(6), picked(2);
  const int32_t targets[2] = {2, 0};
  log_softmax_forward(full.data(), logits.data(), 2, 3);
  log_softmax_gather(picked.data(), logits.data(), targets, 2, 3);
  EXPECT_EQ(picked[0], full[2]);
  EXPECT_EQ(picked[1], full[3]);
  EXPECT_NEAR(full[2], 3 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
}

TEST(Ops, MoeRouteTopKRenormalizedAndTiesToLowerIndex) {
  const float logits[2 * 4] = {0.0f, 2.0f, 1.0f, 2.0f, 5.0f, 0.0f, 0.0f, 0.0f};
  int32_t e[4];
  float w[4];
  moe_route(e, w, logits, 2, 4, 2, true);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);  // tie with expert 1: lower index first
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  EXPECT_EQ(e[2], 0);
  EXPECT_EQ(e[3], 1);
  EXPECT_NEAR(w[2] + w[3], 1.0f, 1e-6);
  moe_route(e, w, logits, 1, 4, 2, false);
  EXPECT_NEAR(w[0], std::exp(2.0) / (1 + std::exp(1.0) + 2 * std::exp(2.0)), 1e-6);
}

TEST(Ops, SwigluIsSiluTimesUp) {
  const float g[3] = {-2.0f, 0.0f, 3.0f}, u[3] = {1.0f, 5.0f, 2.0f};
  float h[3];
  swiglu_forward(h, g, u, 3);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(h[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

// The attention of a run of tokens, one KV group at a time, on every backend,
// equals the scalar per-token reference bit for bit: head sizes on and off the
// 16-lane path, grouped heads, runs that start mid-sequence, and scores that
// reach exp_f's limits, NaN and infinity; keys and values in [pos][kv_dim]
// rows or in a cache's per-group histories.
TEST(OpsBackends, AttentionGroupEqualsPerTokenReference) {
  std::vector<const detail::OpsKernels*> tables = {&detail::kOpsScalar};
  if (cpu_features().avx2) tables.push_back(&detail::kOpsAvx2);
  if (cpu_features().avx512) tables.push_back(&detail::kOpsAvx512);
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0, 1);
  struct Case {
    int64_t heads, kvh, hd, T, p0;
    float scale;
    int special;
  };
  const Case cases[] = {{4, 2, 32, 37, 0, 0.18f, 0},
                        {8, 2, 32, 1, 40, 0.18f, 0},
                        {2, 2, 128, 20, 3, 0.09f, 0},
                        {6, 3, 48, 9, 5, 0.14f, 0},
                        {4, 1, 16, 33, 0, 40.0f, 0},
                        {4, 2, 64, 17, 1, 0.13f, 1},
                        {4, 2, 32, 16, 16, 0.2f, 2},
                        {2, 1, 16, 3, 0, 0.25f, 3},
                        // groups of 6 (heads in blocks of 4 + 2), 8 (4 + 4) and 3 (2 + 1); hd 128 with 4 heads
                        {12, 2, 32, 7, 3, 0.2f, 0},
                        {8, 1, 16, 5, 0, 0.3f, 0},
                        {3, 1, 32, 6, 1, 0.2f, 1},
                        {8, 2, 128, 4, 2, 0.09f, 0}};
  for (const Case& cs : cases) {
    const int64_t n = cs.p0 + cs.T, stride = cs.kvh * cs.hd, qd = cs.heads * cs.hd;
    std::vector<float> q(cs.T * qd), k(n * stride), v(n * stride);
    for (auto* b : {&q, &k, &v})
      for (auto& x : *b) x = nd(rng);
    if (cs.special == 1) q[qd + 5] = NAN;               // one token's head: all NaN
    if (cs.special == 2) k[7 * stride + 3] = INFINITY;  // inf * q: +-inf scores, NaN after max-subtraction
    if (cs.special == 3) v[1 * stride] = -INFINITY;
    std::vector<float> ref(cs.T * qd), scores(n);
    for (int64_t t = 0; t < cs.T; ++t)
      detail::kOpsScalar.attention(&ref[t * qd], &q[t * qd], k.data(), v.data(), cs.p0 + t + 1, stride, cs.heads,
                                   cs.kvh, cs.hd, cs.scale, scores.data());
    // Each group's keys and values as a KvCache holds them: [group][pos][hd], stride hd.
    const auto kg = test::group_histories(k, n, cs.kvh, cs.hd, stride);
    const auto vg = test::group_histories(v, n, cs.kvh, cs.hd, stride);
    for (const auto* tab : tables)
      for (const bool grouped : {false, true}) {
        std::vector<float> out(cs.T * qd, 7.0f);
        for (int64_t g = 0; g < cs.kvh; ++g)
          if (grouped)
            tab->attention_group(out.data(), q.data(), cs.T, cs.p0, &kg[g * n * cs.hd], &vg[g * n * cs.hd], cs.hd,
                                 cs.heads, cs.kvh, cs.hd, g, cs.scale);
          else
            tab->attention_group(out.data(), q.data(), cs.T, cs.p0, &k[g * cs.hd], &v[g * cs.hd], stride, cs.heads,
                                 cs.kvh, cs.hd, g, cs.scale);
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_EQ(f32_bits(out[i]), f32_bits(ref[i]))
              << (tab == &detail::kOpsScalar ? "scalar"
                  : tab == &detail::kOpsAvx2 ? "avx2"
                                             : "avx512")
              << (grouped ? " grouped" : " rows") << " hd " << cs.hd << " T " << cs.T << " p0 " << cs.p0 << " at " << i;
      }
  }
}

// exp16 (kernels/ops/math_avx512.h) and exp8 (math_avx2.h) equal exp_f lane
// by lane on every class of input: both range limits, the subnormal results,
// the power-of-two splits, NaN (payload and sign kept) and infinities, and a
// sweep of every exponent.
TEST(OpsBackends, VectorExpEqualsExpF) {
  if (!cpu_features().avx2 && !cpu_features().avx512) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          88.72283935546875f,
                          88.7228f,
                          88.73f,
                          -103.972084045410f,
                          -103.97f,
                          -103.98f,
                          -87.3f,
                          -88.0f,
                          -100.0f,
                          87.5f,
                          88.5f,
                          INFINITY,
                          -INFINITY,
                          NAN,
                          -NAN,
                          1e-30f,
                          -1e-30f,
                          1e-45f};
  uint32_t nan_payload = 0x7FA00001u;  // a signalling NaN: returned as is, as the scalar does
  float snan;
  std::memcpy(&snan, &nan_payload, 4);
  x.push_back(snan);
  for (uint32_t bits = 0; bits < 0xFFFFFFFFu - 0x00012345u; bits += 0x00012345u) {
    float f;
    std::memcpy(&f, &bits, 4);
    x.push_back(f);
  }
  for (float f = -104.0f; f < 89.0f; f += 0.0137f) x.push_back(f);
  std::vector<std::pair<const char*, void (*)(float*, const float*, int64_t)>> impls;
  if (cpu_features().avx2) impls.push_back({"exp8", detail::exp_avx2});
  if (cpu_features().avx512) impls.push_back({"exp16", detail::exp_avx512});
  for (const auto& [name, fn] : impls) {
    std::vector<float> y(x.size());
    fn(y.data(), x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(f32_bits(y[i]), f32_bits(exp_f(x[i]))) << name << ": x = " << x[i];
  }
}

// The AVX2 and AVX-512 builds of every op agree bit for bit with the baseline build.
void expect_build_matches_scalar(const detail::OpsKernels& b, const char* name) {
  SCOPED_TRACE(name);
  const auto& a = detail::kOpsScalar;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 2);
  auto rnd = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
  };
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    for (size_t i = 0; i < x.size(); ++i)
      if (f32_bits(x[i]) != f32_bits(y[i])) return false;
    return true;
  };
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t rows = 1 + trial % 5, dim = 32 + 17 * trial;
    const auto x = rnd(rows * dim), w = rnd(dim);
    std::vector<float> y1(rows * dim), y2(rows * dim);
    a.rmsnorm(y1.data(), x.data(), w.data(), rows, dim, 1e-6f);
    b.rmsnorm(y2.data(), x.data(), w.data(), rows, dim, 1e-6f);
    EXPECT_TRUE(same(y1, y2)) << "rmsnorm " << trial;
    auto g = rnd(dim), u = rnd(dim);
    for (auto& v : g) v *= 10;  // reach exp_f's range limits
    a.swiglu(y1.data(), g.data(), u.data(), dim);
    b.swiglu(y2.data(), g.data(), u.data(), dim);
    EXPECT_TRUE(
        same(std::vector<float>(y1.begin(), y1.begin() + dim), std::vector<float>(y2.begin(), y2.begin() + dim)))
        << "swiglu " << trial;
    auto r1 = x, r2 = x;
    const auto c = rnd(16), s = rnd(16);
    a.rope(r1.data(), rows * dim / 32, 32, c.data(), s.data());
    b.rope(r2.data(), rows * dim / 32, 32, c.data(), s.data());
    EXPECT_TRUE(same(r1, r2)) << "rope " << trial;
    auto s1 = x, s2 = x;
    a.softmax(s1.data(), rows, dim);
    b.softmax(s2.data(), rows, dim);
    EXPECT_TRUE(same(s1, s2)) << "softmax " << trial;
    EXPECT_EQ(f32_bits(a.logsumexp(x.data(), dim)), f32_bits(b.logsumexp(x.data(), dim))) << trial;
    const int64_t heads = 4, kvh = 2, hd = 32, npos = 1 + 7 * trial, stride = kvh * hd;
    const auto q = rnd(heads * hd), k = rnd(npos * stride), v = rnd(npos * stride);
    std::vector<float> o1(heads * hd), o2(heads * hd), sc(npos);
    a.attention(o1.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh, hd, 0.17f, sc.data());
    b.attention(o2.data(), q.data(), k.data(), v.data(), npos, stride, heads, kvh, hd, 0.17f, sc.data());
    EXPECT_TRUE(same(o1, o2)) << "attention " << trial;
  }
}

TEST(OpsBackends, VectorBuildsMatchScalarBuild) {
  if (cpu_features().avx2) expect_build_matches_scalar(detail::kOpsAvx2, "avx2");
  if (cpu_features().avx512) expect_build_matches_scalar(detail::kOpsAvx512, "avx512");
  if (!cpu_features().avx2 && !cpu_features().avx512) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
}

}  // namespace
}  // namespace mxrl
