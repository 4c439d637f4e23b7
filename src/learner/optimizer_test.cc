#include "learner/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "testing/errors.h"
#include "testing/random.h"
#include "testing/small_config.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

using test::error_of;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool decays(const ParamInfo& p) { return p.role == ParamRole::Linear || p.role == ParamRole::Embedding; }

// Norm weights near 1, the rest small, as after init.
void fill_params(ParamTable& t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  t.for_each([&](const ParamInfo& p, float* x) {
    for (int64_t i = 0; i < p.numel; ++i) x[i] = (p.role == ParamRole::Norm ? 1.0f : 0.0f) + nd(rng);
  });
}

// AdamW in double precision, written from the definition.
struct RefAdamW {
  OptimConfig c;
  std::vector<double> p, m, v;
  std::vector<bool> decay;
  int64_t t = 0;

  RefAdamW(const ParamTable& params, OptimConfig cfg) : c(cfg) {
    p.assign(params.storage().begin(), params.storage().end());
    m.assign(p.size(), 0.0);
    v.assign(p.size(), 0.0);
    decay.assign(p.size(), false);
    for (const ParamInfo& e : params.entries())
      for (int64_t i = 0; i < e.numel; ++i) decay[e.offset + i] = decays(e);
  }

  double step(const std::vector<float>& grads, double* scale_out = nullptr) {
    double sq = 0;
    for (float g : grads) sq += double(g) * double(g);
    const double norm = std::sqrt(sq);
    const double scale = c.clip_norm > 0 && norm > c.clip_norm ? c.clip_norm / norm : 1.0;
    const double lr = lr_at(c, t);
    const double bc1 = 1 - std::pow(c.beta1, double(t + 1)), bc2 = 1 - std::pow(c.beta2, double(t + 1));
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grads[i] * scale;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      if (decay[i]) p[i] -= lr * c.weight_decay * p[i];
      const double mhat = m[i] / bc1, vhat = v[i] / bc2;
      p[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
    }
    ++t;
    if (scale_out) *scale_out = scale;
    return norm;
  }
};

TEST(LrSchedule, WarmupThenConstant) {
  OptimConfig c;
  c.lr = 1e-3;
  c.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 2.5e-4);
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 5e-4);
  EXPECT_DOUBLE_EQ(lr_at(c, 2), 7.5e-4);
  EXPECT_EQ(lr_at(c, 3), 1e-3);
  EXPECT_EQ(lr_at(c, 4), 1e-3);
  EXPECT_EQ(lr_at(c, 1000000), 1e-3);
  c.warmup_steps = 0;
  EXPECT_EQ(lr_at(c, 0), 1e-3);
  EXPECT_THROW(lr_at(c, -1), Error);
}

TEST(LrSchedule, CosineWithWarmup) {
  OptimConfig c;
  c.lr = 2.0;
  c.warmup_steps = 2;
  c.schedule = LrSchedule::Cosine;
  c.total_steps = 10;
  c.min_lr_ratio = 0.1;
  c.validate();
  EXPECT_DOUBLE_EQ(lr_at(c, 0), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 1), 2.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 2), 2.0);  // the peak, right after warmup
  // A quarter of the way: 0.2 + 1.8 * (1 + cos(pi/4)) / 2.
  EXPECT_NEAR(lr_at(c, 4), 0.2 + 0.9 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(lr_at(c, 6), 1.1, 1e-15);  // halfway: the mean of peak and floor
  EXPECT_NEAR(lr_at(c, 9), 0.2 + 0.9 * (1 + std::cos(M_PI * 7 / 8)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 0.2);  // the floor at total_steps
  EXPECT_DOUBLE_EQ(lr_at(c, 11), 0.2);
  EXPECT_DOUBLE_EQ(lr_at(c, 1000), 0.2);
  for (int64_t s = 2; s < 10; ++s) EXPECT_GT(lr_at(c, s), lr_at(c, s + 1)) << s;

  c.warmup_steps = 0;
  c.min_lr_ratio = 0.0;
  EXPECT_EQ(lr_at(c, 0), 2.0);
  EXPECT_EQ(lr_at(c, 10), 0.0);
}

TEST(OptimConfig, ValidateNamesTheField) {
  auto bad = [](auto mutate) {
    OptimConfig c;
    mutate(c);
    return error_of([&] { c.validate(); });
  };
  OptimConfig().validate();
  EXPECT_NE(bad([](OptimConfig& c) { c.lr = 0; }).find("lr"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.lr = NAN; }).find("lr"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.beta1 = 1.0; }).find("beta1"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.beta2 = -0.1; }).find("beta2"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.eps = 0; }).find("eps"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.weight_decay = -1; }).find("weight_decay"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.weight_decay = 1000; }).find("weight_decay"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.clip_norm = NAN; }).find("clip_norm"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.warmup_steps = -1; }).find("warmup_steps"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) { c.min_lr_ratio = 1.5; }).find("min_lr_ratio"), std::string::npos);
  EXPECT_NE(bad([](OptimConfig& c) {
              c.schedule = LrSchedule::Cosine;
              c.warmup_steps = 5;
              c.total_steps = 5;
            }).find("total_steps"),
            std::string::npos);
  EXPECT_EQ(bad([](OptimConfig& c) { c.clip_norm = 0; }), "");  // no clipping
  EXPECT_EQ(bad([](OptimConfig& c) { c.clip_norm = -1; }), "");
}

TEST(OptimConfig, JsonRoundTripIsExact) {
  OptimConfig c;
  c.lr = 0.1 + 0.2;  // 0.30000000000000004
  c.beta1 = 0.8999999999999999;
  c.beta2 = 0.999;
  c.eps = 1e-8 / 3;
  c.weight_decay = 1.0 / 7;
  c.clip_norm = -1;
  c.warmup_steps = 17;
  c.schedule = LrSchedule::Cosine;
  c.total_steps = 1000000000001;
  c.min_lr_ratio = 2.0 / 3;
  const OptimConfig d = OptimConfig::from_json(nlohmann::json::parse(c.to_json().dump()));
  EXPECT_EQ(d.lr, c.lr);
  EXPECT_EQ(d.beta1, c.beta1);
  EXPECT_EQ(d.beta2, c.beta2);
  EXPECT_EQ(d.eps, c.eps);
  EXPECT_EQ(d.weight_decay, c.weight_decay);
  EXPECT_EQ(d.clip_norm, c.clip_norm);
  EXPECT_EQ(d.warmup_steps, c.warmup_steps);
  EXPECT_EQ(d.schedule, c.schedule);
  EXPECT_EQ(d.total_steps, c.total_steps);
  EXPECT_EQ(d.min_lr_ratio, c.min_lr_ratio);
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_EQ(c.to_json()["schedule"], "cosine");

  // Missing keys take the defaults.
  const OptimConfig e = OptimConfig::from_json(nlohmann::json{{"lr", 0.5}});
  EXPECT_EQ(e.lr, 0.5);
  EXPECT_EQ(e.beta2, OptimConfig().beta2);
  EXPECT_EQ(e.schedule, LrSchedule::Constant);
}

TEST(OptimConfig, FromJsonRejectsBadInput) {
  auto err = [](const char* text) { return error_of([&] { OptimConfig::from_json(nlohmann::json::parse(text)); }); };
  EXPECT_NE(err(R"({"lrr": 1})").find("unknown key 'lrr'"), std::string::npos);
  EXPECT_NE(err(R"({"lr": "big"})").find("lr must be a number"), std::string::npos);
  EXPECT_NE(err(R"({"warmup_steps": 1.5})").find("warmup_steps must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"schedule": "linear"})").find("schedule"), std::string::npos);
  EXPECT_NE(err(R"({"schedule": "cosine", "total_steps": 0})").find("total_steps"), std::string::npos);
  EXPECT_NE(err(R"([1, 2])").find("object"), std::string::npos);
}

TEST(AdamW, RestoreTakesAFittingStateAndRefusesAnotherModelsNamingIt) {
  const ModelConfig cfg = small_test_config(false);
  AdamW opt(ParamTable(cfg, false), OptimConfig{});
  const size_t n = opt.m().size();
  std::vector<float> m(n, 0.25f), v(n, 0.5f);
  opt.restore(m, v, 7, "state");
  EXPECT_EQ(opt.step(), 7);
  EXPECT_EQ(opt.m(), m);
  EXPECT_EQ(opt.v(), v);
  EXPECT_EQ(error_of([&] { opt.restore(std::vector<float>(n + 1), v, 8, "dir/state"); }),
            "dir/state: optimizer state does not fit the model");
  EXPECT_EQ(opt.step(), 7);  // refused whole
  EXPECT_EQ(opt.m(), m);
}

TEST(GlobalGradNorm, KnownValuesAndDeterminism) {
  EXPECT_EQ(global_grad_norm({}), 0.0);
  EXPECT_EQ(global_grad_norm({3.0f, -4.0f}), 5.0);
  const std::vector<float> g = test::randn(100003, 7, 0.3f);  // not a multiple of the block
  long double ref = 0;
  for (float x : g) ref += static_cast<long double>(x) * x;
  const double serial = global_grad_norm(g);
  EXPECT_NEAR(serial, std::sqrt(static_cast<double>(ref)), 1e-12 * serial);
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    const double par = global_grad_norm(g, Exec{&pool});
    EXPECT_EQ(std::memcmp(&par, &serial, sizeof(double)), 0) << threads << " threads";
  }
}

class AdamWTest : public ::testing::TestWithParam<bool> {};  // param: MoE layout

TEST_P(AdamWTest, MatchesDoubleReference) {
  const ModelConfig cfg = small_test_config(GetParam());
  ParamTable params(cfg);
  fill_params(params, 1);
  OptimConfig oc;
  oc.lr = 1e-2;
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.eps = 1e-8;
  oc.weight_decay = 0.1;
  oc.clip_norm = 2.0;
  oc.warmup_steps = 2;
  oc.schedule = LrSchedule::Cosine;
  oc.total_steps = 5;
  oc.min_lr_ratio = 0.1;
  AdamW opt(ParamTable(cfg, false), oc);
  ASSERT_EQ(static_cast<int64_t>(opt.m().size()), params.numel());
  ASSERT_EQ(static_cast<int64_t>(opt.v().size()), params.numel());
  RefAdamW ref(params, oc);

  const int64_t n = params.numel();
  // The gradient norms straddle the clip: about 0.6, 6, 1.9, 12, 3.
  const float sigmas[] = {0.6f, 6.0f, 1.9f, 12.0f, 3.0f};
  int clipped = 0;
  for (int s = 0; s < 5; ++s) {
    const std::vector<float> g = test::randn(n, 100 + s, sigmas[s] / std::sqrt(float(n)));
    double ref_scale = 0;
    const double ref_norm = ref.step(g, &ref_scale);
    const OptimStats st = opt.step(params, g);
    EXPECT_EQ(opt.step(), s + 1);
    EXPECT_NEAR(st.grad_norm, ref_norm, 1e-12 * ref_norm);
    EXPECT_EQ(st.lr, lr_at(oc, s));
    EXPECT_NEAR(st.clip_scale, ref_scale, 1e-12);
    if (ref_norm > oc.clip_norm) {
      ++clipped;
      EXPECT_LT(st.clip_scale, 1.0);
      EXPECT_NEAR(st.clip_scale * st.grad_norm, oc.clip_norm, 1e-12);
    } else {
      EXPECT_EQ(st.clip_scale, 1.0);
    }
    // Moments: errors relative to the largest magnitude (m can cancel to ~0).
    double worst_p = 0, worst_m = 0, worst_v = 0, max_m = 0, max_v = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst_p = std::max(worst_p, std::fabs(params.storage()[i] - ref.p[i]));
      worst_m = std::max(worst_m, std::fabs(opt.m()[i] - ref.m[i]));
      worst_v = std::max(worst_v, std::fabs(opt.v()[i] - ref.v[i]));
      max_m = std::max(max_m, std::fabs(ref.m[i]));
      max_v = std::max(max_v, std::fabs(ref.v[i]));
    }
    EXPECT_LT(worst_p, 2e-6) << "step " << s;
    EXPECT_LT(worst_m, 1e-6 * max_m) << "step " << s;
    EXPECT_LT(worst_v, 1e-6 * max_v) << "step " << s;
  }
  EXPECT_EQ(clipped, 3);
}

TEST_P(AdamWTest, WeightDecayOnlyOnLinearAndEmbedding) {
  const ModelConfig cfg = small_test_config(GetParam());
  ParamTable params(cfg);
  fill_params(params, 2);
  const std::vector<float> before = params.storage();
  OptimConfig oc;
  oc.lr = 0.05;
  oc.weight_decay = 0.2;
  AdamW opt(params, oc);
  // A zero gradient: the Adam term is exactly 0, only the decay moves weights.
  const OptimStats st = opt.step(params, std::vector<float>(params.numel(), 0.0f));
  EXPECT_EQ(st.grad_norm, 0.0);
  EXPECT_EQ(st.clip_scale, 1.0);
  const float factor = static_cast<float>(1.0 - 0.05 * 0.2);
  int norms = 0, decayed = 0;
  params.for_each([&](const ParamInfo& p, const float* x) {
    for (int64_t i = 0; i < p.numel; ++i) {
      const float b = before[p.offset + i];
      if (decays(p)) {
        ASSERT_EQ(x[i], b * factor) << p.name;
      } else {
        ASSERT_EQ(x[i], b) << p.name;
      }
    }
    (decays(p) ? decayed : norms)++;
  });
  EXPECT_GT(norms, 0);
  EXPECT_GT(decayed, 0);
}

TEST_P(AdamWTest, IdenticalAcrossThreadCounts) {
  const ModelConfig cfg = small_test_config(GetParam());
  OptimConfig oc;
  oc.lr = 3e-3;
  oc.weight_decay = 0.01;
  oc.clip_norm = 1.0;
  oc.warmup_steps = 1;
  ParamTable base(cfg);
  fill_params(base, 3);
  auto run = [&](ThreadPool* pool) {
    ParamTable p = base;
    AdamW opt(p, oc);
    std::vector<double> norms;
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> g = test::randn(p.numel(), 200 + s, 0.01f * (s + 1));
      norms.push_back(opt.step(p, g, Exec{pool}).grad_norm);
    }
    return std::make_tuple(p.storage(), opt.m(), opt.v(), norms);
  };
  const auto serial = run(nullptr);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    const auto par = run(&pool);
    EXPECT_TRUE(bitwise_equal(std::get<0>(par), std::get<0>(serial))) << threads << " threads: params";
    EXPECT_TRUE(bitwise_equal(std::get<1>(par), std::get<1>(serial))) << threads << " threads: m";
    EXPECT_TRUE(bitwise_equal(std::get<2>(par), std::get<2>(serial))) << threads << " threads: v";
    EXPECT_EQ(std::get<3>(par), std::get<3>(serial));
  }
  EXPECT_FALSE(bitwise_equal(std::get<0>(serial), base.storage()));
}

INSTANTIATE_TEST_SUITE_P(Layouts, AdamWTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Moe" : "Dense"; });

TEST(AdamW, ClipsExactlyWhenNormExceedsClip) {
  const ModelConfig cfg = small_test_config(false);
  ParamTable params(cfg);
  OptimConfig oc;
  oc.clip_norm = 1.0;
  const float omb1 = static_cast<float>(1.0 - oc.beta1);
  const int64_t k = 1234;
  auto one_step = [&](float value, const OptimConfig& c) {
    AdamW opt(params, c);
    ParamTable p = params;
    std::vector<float> g(p.numel(), 0.0f);
    g[k] = value;
    const OptimStats st = opt.step(p, g);
    return std::make_pair(st, opt.m()[k]);
  };
  // norm == clip: untouched.
  auto [at, m_at] = one_step(1.0f, oc);
  EXPECT_EQ(at.grad_norm, 1.0);
  EXPECT_EQ(at.clip_scale, 1.0);
  EXPECT_EQ(m_at, omb1 * 1.0f);
  // Just above: clipped.
  const float above = std::nextafter(1.0f, 2.0f);
  auto [ab, m_ab] = one_step(above, oc);
  EXPECT_EQ(ab.grad_norm, double(above));
  EXPECT_LT(ab.clip_scale, 1.0);
  EXPECT_EQ(ab.clip_scale, 1.0 / double(above));
  // Twice the clip: the clipped gradient is exactly 1.
  auto [two, m_two] = one_step(-2.0f, oc);
  EXPECT_EQ(two.clip_scale, 0.5);
  EXPECT_EQ(m_two, omb1 * -1.0f);
  // clip_norm <= 0 disables clipping.
  OptimConfig off = oc;
  off.clip_norm = 0;
  auto [un, m_un] = one_step(100.0f, off);
  EXPECT_EQ(un.clip_scale, 1.0);
  EXPECT_EQ(m_un, omb1 * 100.0f);
}

TEST(AdamW, BiasCorrectionAndStepCounter) {
  // One element per check: after the first step the update is lr * sign(g)
  // (up to eps), whatever the gradient's size: bias correction at t = 1.
  const ModelConfig cfg = small_test_config(false);
  ParamTable params(cfg);
  OptimConfig oc;
  oc.lr = 0.01;
  oc.clip_norm = 0;
  AdamW opt(params, oc);
  std::vector<float> g(params.numel(), 0.0f);
  g[0] = 0.003f;
  g[1] = -50.0f;
  opt.step(params, g);
  EXPECT_NEAR(params.storage()[0], -0.01, 1e-7);
  EXPECT_NEAR(params.storage()[1], 0.01, 1e-7);
  EXPECT_EQ(params.storage()[2], 0.0f);
  EXPECT_EQ(opt.step(), 1);
  // Resuming at step 5 uses t = 6 and lr_at(5).
  opt.set_step(5);
  EXPECT_EQ(opt.step(), 5);
  EXPECT_THROW(opt.set_step(-1), Error);
}

TEST(AdamW, RejectsBadInputWithoutChangingState) {
  const ModelConfig cfg = small_test_config(false);
  ParamTable params(cfg);
  fill_params(params, 4);
  const std::vector<float> before = params.storage();
  AdamW opt(params, OptimConfig{});
  EXPECT_NE(error_of([&] { opt.step(params, std::vector<float>(params.numel() - 1, 0.0f)); }).find("gradient has"),
            std::string::npos);
  std::vector<float> g(params.numel(), 0.1f);
  g[77] = NAN;
  EXPECT_NE(error_of([&] { opt.step(params, g); }).find("gradient norm is nan"), std::string::npos);
  g[77] = INFINITY;
  EXPECT_NE(error_of([&] { opt.step(params, g); }).find("gradient norm is inf"), std::string::npos);
  ParamTable other(small_test_config(true));
  EXPECT_THROW(opt.step(other, std::vector<float>(other.numel(), 0.0f)), Error);
  EXPECT_EQ(opt.step(), 0);
  EXPECT_TRUE(bitwise_equal(params.storage(), before));
  EXPECT_TRUE(bitwise_equal(opt.m(), std::vector<float>(params.numel(), 0.0f)));

  OptimConfig bad;
  bad.beta1 = 1.0;
  EXPECT_THROW(AdamW(params, bad), Error);
}

}  // namespace
}  // namespace mxrl
