// The seven checks: a clean sync passes all of them; each check reports what
// breaks its condition, under its own name, naming the tensor or sample.
#include <gtest/gtest.h>

#include "model/init.h"
#include "sync/sync.h"
#include "testing/small_config.h"
#include "util/error.h"

namespace mxrl {
namespace {

ParamTable params(bool moe, uint64_t seed = 1) {
  ParamTable p(small_test_config(moe));
  init_params(p, seed);
  return p;
}

Probe probe() {
  Probe p;
  p.tokens = {{1, 5, 9, 13, 2, 7}, {3, 4, 40, 41}};
  p.prompt_len = {2, 1};
  return p;
}

const CheckResult& by_name(const SyncReport& r, const std::string& name) {
  for (const CheckResult& c : r.checks)
    if (c.name == name) return c;
  throw std::runtime_error("no check " + name);
}

bool mentions(const CheckResult& c, const std::string& s) {
  for (const std::string& f : c.findings)
    if (f.find(s) != std::string::npos) return true;
  return false;
}

struct Fixture {
  ParamTable masters;
  Model learner;
  Engine engine;
  Fixture(bool moe, const std::string& sampler_plan, const std::string& learner_plan = "mxfp8")
      : masters(params(moe)),
        learner(masters, PrecisionPlan::named(learner_plan)),
        engine(std::make_shared<const Model>(params(moe, 9), PrecisionPlan::named(sampler_plan)), 0) {}
};

TEST(Checks, ACleanShipSyncPassesAllSevenAndAgreesBitwise) {
  for (bool moe : {false, true}) {
    Fixture f(moe, "mxfp8");
    SyncSettings s;
    s.bound.bitwise = same_numerics(f.learner, f.engine.model().plan());
    EXPECT_TRUE(s.bound.bitwise);
    const SyncReport r = sync_weights(f.learner, f.masters, f.engine, 1, s, probe(), {}, 0);
    EXPECT_TRUE(r.passed()) << ::testing::PrintToString(r.findings());
    ASSERT_EQ(r.checks.size(), 7u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(r.checks[i].name, check_names()[i]);
    EXPECT_TRUE(by_name(r, "agreement").measured["bitwise_equal"].get<bool>());
    EXPECT_EQ(f.engine.version(), 1u);
  }
}

TEST(Checks, ABf16SamplerAgreesWithinItsBoundAndReportsTheKl) {
  Fixture f(false, "bf16");
  SyncSettings s;
  s.mode = SyncMode::Requantize;
  s.bound.bitwise = same_numerics(f.learner, f.engine.model().plan());
  EXPECT_FALSE(s.bound.bitwise);
  const SyncReport r = sync_weights(f.learner, f.masters, f.engine, 1, s, probe(), {}, 0);
  EXPECT_TRUE(r.passed()) << ::testing::PrintToString(r.findings());
  const CheckResult& a = by_name(r, "agreement");
  EXPECT_GT(a.measured["kl_mean"].get<double>(), 0.0);
  EXPECT_FALSE(a.measured["bitwise_equal"].get<bool>());
  // Held to bitwise, the same sampler fails agreement and says by how much.
  s.bound.bitwise = true;
  const SyncReport strict = sync_weights(f.learner, f.masters, f.engine, 2, s, probe(), {}, 1);
  EXPECT_FALSE(by_name(strict, "agreement").passed);
  EXPECT_TRUE(mentions(by_name(strict, "agreement"), "probe tokens differ"));
}

TEST(Checks, ManifestFindingsLandUnderTheConditionTheyBreak) {
  const ParamTable m = params(true);
  const Model model(m, PrecisionPlan::named("mxfp8"));
  const std::vector<TensorDigest> expected = model_digests(model);
  auto run = [&](std::vector<TensorDigest> live, const std::vector<TensorDigest>& previous = {}) {
    return check_manifests(expected, live, previous);
  };
  auto find = [&](const std::string& name, const std::string& part) {
    for (size_t i = 0; i < expected.size(); ++i)
      if (expected[i].name == name && expected[i].part == part) return i;
    throw std::runtime_error("no " + name);
  };
  for (const CheckResult& c : run(expected)) EXPECT_TRUE(c.passed) << c.name;
  const size_t q = find("model.layers.0.self_attn.q_proj.weight", "codes");
  const size_t k = find("model.layers.0.self_attn.k_proj.weight", "codes");
  const size_t router = find("model.layers.0.mlp.gate.weight", "bf16");
  {  // a tensor missing: coverage
    auto live = expected;
    live.erase(live.begin() + static_cast<long>(q));
    const auto r = run(live);
    EXPECT_FALSE(r[0].passed);
    EXPECT_TRUE(mentions(r[0], "q_proj"));
  }
  {  // q holding k's bytes: placement
    auto live = expected;
    live[q].xxh3 = expected[k].xxh3;
    const auto r = run(live);
    EXPECT_TRUE(r[0].passed);
    EXPECT_FALSE(r[1].passed);
    EXPECT_TRUE(mentions(r[1], "holds the bytes of model.layers.0.self_attn.k_proj.weight"));
  }
  {  // other codes: grid
    auto live = expected;
    live[q].xxh3 ^= 1;
    const auto r = run(live);
    EXPECT_FALSE(r[2].passed);
    EXPECT_TRUE(r[3].passed);
  }
  {  // a router value changed: exceptions
    auto live = expected;
    live[router].xxh3 ^= 1;
    const auto r = run(live);
    EXPECT_TRUE(r[2].passed);
    EXPECT_FALSE(r[3].passed);
    EXPECT_TRUE(mentions(r[3], "mlp.gate.weight"));
  }
  {  // still the previous version's bytes: coverage (the sync did not write it)
    auto previous = expected, live = expected;
    previous[q].xxh3 ^= 7;
    live[q].xxh3 = previous[q].xxh3;
    const auto r = run(live, previous);
    EXPECT_FALSE(r[0].passed);
    EXPECT_TRUE(mentions(r[0], "previous version"));
  }
  {  // the lm_head quantized by the sampler: exceptions (the learner keeps it BF16)
    const Model fp8_head(m, [] {
      PrecisionPlan p = PrecisionPlan::named("mxfp8");
      p.lm_head = p.decoder;
      return p;
    }());
    const auto r = check_manifests(expected, model_digests(fp8_head));
    EXPECT_FALSE(r[3].passed);
    EXPECT_TRUE(mentions(r[3], "lm_head.weight"));
  }
}

TEST(Checks, AtomicityCatchesSamplesSpanningVersionsAndAFailedSyncIsRefusedWhole) {
  Fixture f(false, "mxfp8");
  SyncSettings s;
  const SyncReport ok = sync_weights(f.learner, f.masters, f.engine, 1, s, probe(), {}, 0);
  ASSERT_TRUE(ok.passed());
  GeneratedSample a, b;
  a.version = 1, a.token_versions = {1, 1, 1};
  b.version = 1, b.token_versions = {1, 0, 1};
  Expectation e;
  e.version = 1;
  const auto live = model_digests(f.engine.model());
  EXPECT_TRUE(check_atomicity(f.engine, e, {a}, 1, live).passed);
  const CheckResult bad = check_atomicity(f.engine, e, {a, b}, 1, live);
  EXPECT_FALSE(bad.passed);
  EXPECT_TRUE(mentions(bad, "token [1]"));
  EXPECT_FALSE(check_atomicity(f.engine, e, {a}, 2, live).passed);  // meant for version 2
  // A bundle damaged in transit is refused; the old version keeps serving, whole.
  const Channel flip = [](std::vector<std::byte> b) {
    b.back() ^= std::byte{1};
    return b;
  };
  const SyncReport failed = sync_weights(f.learner, f.masters, f.engine, 2, s, probe(), {}, 1, flip);
  EXPECT_FALSE(failed.applied);
  EXPECT_FALSE(failed.error.empty());
  EXPECT_EQ(f.engine.version(), 1u);
  EXPECT_TRUE(by_name(failed, "atomicity").passed) << ::testing::PrintToString(failed.findings());
  EXPECT_FALSE(failed.passed());
}

TEST(Checks, FreshnessPassesAfterASwapAndSeesEveryDerivedObject) {
  Fixture f(false, "mxfp8");
  SyncSettings s;
  const SyncReport r = sync_weights(f.learner, f.masters, f.engine, 3, s, probe(), {}, 0);
  const CheckResult& fr = by_name(r, "freshness");
  EXPECT_TRUE(fr.passed) << ::testing::PrintToString(fr.findings);
  EXPECT_TRUE(f.engine.plan_is_live());
  for (const DerivedObject& d : f.engine.derived_objects()) EXPECT_EQ(d.version, 3u) << d.kind << " " << d.name;
}

// The placement diagnosis of a square linear held transposed, across
// precisions (a re-quantized transpose still counts; the weight itself and
// another weight do not).
TEST(Checks, HoldsTransposeRecognisesATransposedSquareLinear) {
  const ParamTable p = params(false);
  const int64_t n = 64;
  std::vector<float> w(n * n), t(n * n), other(n * n);
  for (int64_t i = 0; i < n * n; ++i) w[i] = p.storage()[i], other[i] = p.storage()[n * n + i];
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) t[c * n + r] = w[r * n + c];
  const LinearPrecision mx{Precision::MXFP8, ElemType::E4M3, ScaleRule::RCeil}, bf16{Precision::BF16};
  const PreparedLinear want = PreparedLinear::prepare("w", w.data(), n, n, mx, {});
  EXPECT_TRUE(holds_transpose(PreparedLinear::prepare("w", t.data(), n, n, mx, {}), want));
  EXPECT_TRUE(holds_transpose(PreparedLinear::prepare("w", t.data(), n, n, bf16, {}), want));
  EXPECT_FALSE(holds_transpose(PreparedLinear::prepare("w", w.data(), n, n, bf16, {}), want));
  EXPECT_FALSE(holds_transpose(PreparedLinear::prepare("w", other.data(), n, n, mx, {}), want));
  EXPECT_FALSE(holds_transpose(PreparedLinear::prepare("w", t.data(), n / 2, n * 2, mx, {}), want));  // not square
}

}  // namespace
}  // namespace mxrl
