// The learner against PyTorch (loss and every gradient of the committed
// fixtures), against the sampler (forward log-probs bitwise equal), and its
// own invariants: thread-count determinism, gradient accumulation over
// micro-batches, weight quantizations reused within a step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "kernels/gemm/gemm.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "model/digest.h"
#include "model/forward.h"
#include "model/init.h"
#include "model/score.h"
#include "testing/small_config.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

std::string fixture(const std::string& name) { return std::string(MXRL_SOURCE_DIR) + "/tests/data/" + name; }

std::vector<float> tensor_f32(const SafetensorsFile& f, const std::string& name) {
  const auto& t = f.at(name);
  std::vector<float> v(t.numel());
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

LearnerConfig config_for(const std::string& plan, int64_t micro = 1 << 20) {
  LearnerConfig c;
  c.recipe.plan = plan;
  c.micro_batch_tokens = micro;
  return c;
}

// Every row of the fixture's tokens as one sequence, all tokens after the first targets.
std::vector<Sequence> fixture_batch(const std::string& dir) {
  const SafetensorsFile ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const auto& t = ref.at("tokens");
  std::vector<int32_t> toks(t.numel());
  std::memcpy(toks.data(), t.data.data(), t.data.size());
  std::vector<Sequence> batch;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    Sequence s;
    s.tokens.assign(toks.begin() + r * t.shape[1], toks.begin() + (r + 1) * t.shape[1]);
    s.target.assign(s.tokens.size(), 1);
    s.target[0] = 0;
    batch.push_back(s);
  }
  return batch;
}

void expect_matches_pytorch(const std::string& name, int64_t micro) {
  const std::string dir = fixture(name);
  Checkpoint ck = load_checkpoint(dir);
  Learner learner(std::move(ck.params), config_for("fp32", micro));
  std::vector<float> grads;
  const double loss = learner.loss_and_grads(fixture_batch(dir), grads);
  const SafetensorsFile ref = SafetensorsFile::open(dir + "/reference.safetensors");
  const float want = tensor_f32(ref, "loss")[0];
  EXPECT_NEAR(loss, want, 2e-6 * std::fabs(want)) << name;
  const SafetensorsFile g = SafetensorsFile::open(dir + "/grads.safetensors");
  double worst = 0;
  int checked = 0;
  for (const ParamInfo& p : learner.params().entries()) {
    const auto want_g = tensor_f32(g, p.name);
    ASSERT_EQ(static_cast<int64_t>(want_g.size()), p.numel) << p.name;
    double maxref = 0, maxdiff = 0;
    for (int64_t i = 0; i < p.numel; ++i) {
      maxref = std::max(maxref, std::fabs(double(want_g[i])));
      maxdiff = std::max(maxdiff, std::fabs(double(grads[p.offset + i]) - want_g[i]));
    }
    ASSERT_GT(maxref, 0.0) << p.name;
    EXPECT_LE(maxdiff / maxref, 2e-5) << name << " " << p.name;
    worst = std::max(worst, maxdiff / maxref);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(g.tensors().size())) << "every fixture gradient is a parameter";
  ::testing::Test::RecordProperty("worst_relative_gradient_error", std::to_string(worst));
}

TEST(LearnerFixtures, DenseTiedLossAndGradientsMatchPyTorch) { expect_matches_pytorch("qwen3-tiny-dense", 1 << 20); }
TEST(LearnerFixtures, MoeLossAndGradientsMatchPyTorch) { expect_matches_pytorch("qwen3-tiny-moe", 1 << 20); }
TEST(LearnerFixtures, GradientAccumulationOverMicroBatchesMatchesToo) {
  expect_matches_pytorch("qwen3-tiny-moe", 24);  // one sequence per micro-batch
}

std::vector<Sequence> random_batch(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Sequence> batch;
  for (int i = 0; i < n; ++i) {
    Sequence s;
    const int len = 4 + static_cast<int>(rng() % 30);
    for (int t = 0; t < len; ++t) s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    for (int t = 0; t < len; ++t) s.target.push_back(t > 0 && rng() % 3 != 0);
    batch.push_back(s);
  }
  return batch;
}

class LearnerPlans : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(LearnerPlans, ForwardLogprobsEqualTheSamplersBitwise) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 3, 0.2f);
  const auto batch = random_batch(7, params.config().vocab_size, 5);
  const Model sampler(params, PrecisionPlan::resolve(plan));
  Learner learner(params, config_for(plan, 64));
  const auto ours = learner.logprobs(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto theirs = score_sequences(sampler, {{batch[i].tokens, 1}});
    size_t j = 0;
    for (size_t t = 1; t < batch[i].tokens.size(); ++t)
      if (batch[i].target[t]) {
        ASSERT_LT(j, ours[i].size());
        ASSERT_EQ(f32_bits(ours[i][j]), f32_bits(theirs[0][t - 1])) << plan << " seq " << i << " token " << t;
        ++j;
      }
    EXPECT_EQ(j, ours[i].size());
  }
}

TEST_P(LearnerPlans, GradientsAreIndependentOfTheThreadCount) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 4, 0.2f);
  const auto batch = random_batch(6, params.config().vocab_size, 6);
  LearnerConfig cfg = config_for(plan, 80);
  cfg.aux_loss_coef = moe ? 0.01 : 0.0;
  std::vector<float> g1, g3;
  Learner one(params, cfg);
  const double l1 = one.loss_and_grads(batch, g1);
  ThreadPool pool(3);
  Learner three(params, cfg, Exec{&pool});
  const double l3 = three.loss_and_grads(batch, g3);
  EXPECT_EQ(l1, l3);
  ASSERT_EQ(g1.size(), g3.size());
  EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), g1.size() * sizeof(float))) << plan;
}

TEST_P(LearnerPlans, WeightQuantizationsPerMicroBatchChangeNothingButTime) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 5, 0.2f);
  const auto batch = random_batch(6, params.config().vocab_size, 7);
  LearnerConfig cfg = config_for(plan, 40);
  std::vector<float> a, b;
  StepResult ra, rb;
  Learner once(params, cfg);
  once.loss_and_grads(batch, a, &ra);
  cfg.recipe.requant_every_microbatch = true;
  Learner every(params, cfg);
  every.loss_and_grads(batch, b, &rb);
  ASSERT_GT(ra.micro_batches, 1);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// Data-parallel shards: the roots each of R ranks computes, summed by the
// combiner's rule, give bitwise the gradient of one rank, for any R (also
// when some ranks own no micro-batch).
TEST_P(LearnerPlans, ShardedGradientsSumToTheSameBitsForAnyRankCount) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 6, 0.2f);
  const auto batch = random_batch(7, params.config().vocab_size, 8);
  LearnerConfig cfg = config_for(plan, 30);
  cfg.aux_loss_coef = moe ? 0.01 : 0.0;
  std::vector<float> whole;
  StepResult info;
  Learner(params, cfg).loss_and_grads(batch, whole, &info);
  ASSERT_GE(info.micro_batches, 5);
  for (int ranks : {2, 3, 4, 8}) {
    std::vector<std::pair<int64_t, std::vector<float>>> roots;
    double loss = 0;
    std::vector<double> all_loss(static_cast<size_t>(info.micro_batches), 0.0);
    for (int r = 0; r < ranks; ++r) {
      Learner l(params, cfg);
      std::vector<double> mb_loss, mb_aux;
      for (auto& root : l.shard_grads(batch, {r, ranks}, mb_loss, mb_aux)) roots.push_back(std::move(root));
      for (size_t i = 0; i < mb_loss.size(); ++i)
        if (!std::isnan(mb_loss[i])) all_loss[i] = mb_loss[i];
    }
    for (double x : all_loss) loss += x;
    std::sort(roots.begin(), roots.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    PairwiseSum sum;
    for (auto& [index, g] : roots) sum.add(std::move(g));
    const std::vector<float> g = sum.finish();
    ASSERT_EQ(g.size(), whole.size());
    EXPECT_EQ(0, std::memcmp(g.data(), whole.data(), g.size() * sizeof(float))) << plan << " ranks " << ranks;
    int64_t targets = 0;
    for (const Sequence& q : batch) targets += q.num_targets();
    EXPECT_EQ(loss / static_cast<double>(targets), info.loss);  // per-micro-batch losses, summed in order
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, LearnerPlans,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values("fp32", "bf16", "mxfp8", "mxfp8-floor", "mxfp8-half")));

// Linears that read the same input share its quantization only when their
// precisions agree: with k and up in BF16 and q, v, gate in MXFP8 (and q in
// E5M2 in layer 0), the learner still agrees with the sampler bitwise, its
// gradients do not depend on the thread count, and they are not those of the
// plain mxfp8 plan.
TEST(Learner, MixedPrecisionsAmongLinearsThatShareAnInput) {
  const std::string path = ::testing::TempDir() + "mxrl_mixed_plan.toml";
  {
    std::ofstream f(path);
    f << "name = \"mixed\"\ndefault = \"mxfp8\"\n[[override]]\nlinears = [\"k\", \"up\"]\nprecision = \"bf16\"\n"
         "[[override]]\nlayers = [0]\nlinears = [\"q\"]\nprecision = \"mxfp8\"\nelem = \"e5m2\"\n";
  }
  for (const bool moe : {false, true}) {
    ParamTable params(small_test_config(moe));
    init_params(params, 8, 0.2f);
    const auto batch = random_batch(6, params.config().vocab_size, 9);
    const Model sampler(params, PrecisionPlan::resolve(path));
    Learner learner(params, config_for(path, 64));
    const auto ours = learner.logprobs(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      const auto theirs = score_sequences(sampler, {{batch[i].tokens, 1}});
      for (size_t t = 1, j = 0; t < batch[i].tokens.size(); ++t) {
        if (!batch[i].target[t]) continue;
        ASSERT_EQ(f32_bits(ours[i][j++]), f32_bits(theirs[0][t - 1])) << "moe " << moe;
      }
    }
    // Each projection is what that linear alone computes from the shared input.
    {
      const ModelConfig& cfg = params.config();
      KvCache cache(cfg);
      const int slot = cache.add_sequence();
      TokenBatch tb;
      for (size_t t = 0; t < batch[0].tokens.size(); ++t) tb.add(batch[0].tokens[t], slot, static_cast<int64_t>(t));
      const int64_t n = tb.size();
      std::vector<float> logits(n * cfg.vocab_size);
      ForwardTrace tr;
      forward(sampler, cache, tb, logits.data(), {}, nullptr, &tr);
      auto alone = [&](const PreparedLinear& L, const std::vector<float>& x, const std::vector<float>& y,
                       const char* what) {
        std::vector<float> mine(n * L.n), scratch;
        L.forward(x.data(), n, mine.data(), scratch, {});
        ASSERT_EQ(y.size(), mine.size()) << what;
        EXPECT_EQ(0, std::memcmp(mine.data(), y.data(), y.size() * sizeof(float))) << what << " moe " << moe;
      };
      for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
        const PreparedLayer& L = sampler.layer(l);
        const LayerTrace& T = tr.layers[l];
        alone(L.q, T.xn1, T.q_raw, "q");
        alone(L.k, T.xn1, T.k_raw, "k");
        if (!L.moe) alone(L.gate, T.xn2, T.gate, "gate"), alone(L.up, T.xn2, T.up, "up");
      }
    }
    std::vector<float> g1, g3, g_mx;
    Learner(params, config_for(path, 64)).loss_and_grads(batch, g1);
    ThreadPool pool(3);
    Learner(params, config_for(path, 64), Exec{&pool}).loss_and_grads(batch, g3);
    Learner(params, config_for("mxfp8", 64)).loss_and_grads(batch, g_mx);
    ASSERT_EQ(g1.size(), g3.size());
    EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), g1.size() * sizeof(float))) << "moe " << moe;
    EXPECT_NE(0, std::memcmp(g1.data(), g_mx.data(), g1.size() * sizeof(float))) << "moe " << moe;
  }
  std::remove(path.c_str());
}

// The AMX kernel family (--kernels amx) is not the pair chain, but its K order
// is fixed: under it the learner's forward log-probs still equal the
// sampler's bitwise, and gradients do not depend on the thread count.
class LearnerAmx : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(LearnerAmx, SamplerAgreementAndThreadInvarianceHoldUnderAmx) {
  if (!detail::amx_available()) GTEST_SKIP() << "no AMX-BF16 here (or the OS refused the tile state)";
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 3, 0.2f);
  const auto batch = random_batch(7, params.config().vocab_size, 5);
  LearnerConfig cfg = config_for(plan, 64);
  std::vector<float> g_auto;
  Learner(params, cfg).loss_and_grads(batch, g_auto);

  const Exec amx{nullptr, Backend::Auto, PairKernel::Amx};
  ASSERT_EQ(resolve_pair_kernel(amx.pair_kernel, 1), PairKernel::Amx);
  const Model sampler(params, PrecisionPlan::resolve(plan), amx);
  Learner learner(params, cfg, amx);
  const auto ours = learner.logprobs(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    const auto theirs = score_sequences(sampler, {{batch[i].tokens, 1}}, {}, amx);
    for (size_t t = 1, j = 0; t < batch[i].tokens.size(); ++t)
      if (batch[i].target[t]) {
        ASSERT_LT(j, ours[i].size());
        ASSERT_EQ(f32_bits(ours[i][j++]), f32_bits(theirs[0][t - 1])) << plan << " seq " << i << " token " << t;
      }
  }
  std::vector<float> g1, g3;
  Learner(params, cfg, amx).loss_and_grads(batch, g1);
  ThreadPool pool(3);
  Learner(params, cfg, Exec{&pool, Backend::Auto, PairKernel::Amx}).loss_and_grads(batch, g3);
  ASSERT_EQ(g1.size(), g3.size());
  EXPECT_EQ(0, std::memcmp(g1.data(), g3.data(), g1.size() * sizeof(float))) << plan;
  // And AMX really ran: its sums are rounded differently from the pair chain's.
  EXPECT_NE(0, std::memcmp(g1.data(), g_auto.data(), g1.size() * sizeof(float))) << plan;
}

INSTANTIATE_TEST_SUITE_P(Plans, LearnerAmx, ::testing::Combine(::testing::Bool(), ::testing::Values("bf16", "mxfp8")));

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

TEST(Learner, LowPrecisionGradientsFollowTheFp32Ones) {
  for (bool moe : {false, true}) {
    ParamTable params(small_test_config(moe));
    init_params(params, 8, 0.1f);
    const auto batch = random_batch(8, params.config().vocab_size, 9);
    std::vector<float> g32, gbf, gmx, ghy;
    Learner(params, config_for("fp32")).loss_and_grads(batch, g32);
    Learner(params, config_for("bf16")).loss_and_grads(batch, gbf);
    Learner(params, config_for("mxfp8")).loss_and_grads(batch, gmx);
    LearnerConfig hy = config_for("mxfp8");
    hy.recipe.hybrid = true;
    Learner(params, hy).loss_and_grads(batch, ghy);
    EXPECT_GT(cosine(g32, gbf), 0.999) << moe;
    EXPECT_GT(cosine(g32, gmx), 0.98) << moe;
    EXPECT_GT(cosine(g32, ghy), 0.98) << moe;
    EXPECT_NE(gmx, ghy) << "E5M2 gradients are a different grid";
    EXPECT_NE(g32, gmx);
  }
}

TEST(Learner, StepsReduceTheLossOnAFixedBatch) {
  for (const char* plan : {"fp32", "bf16", "mxfp8"}) {
    ParamTable params(small_test_config(false));
    init_params(params, 10, 0.05f);
    const auto batch = random_batch(4, params.config().vocab_size, 11);
    LearnerConfig cfg = config_for(plan);
    cfg.optim.lr = 3e-3;
    Learner learner(params, cfg);
    const double first = learner.step(batch).loss;
    double last = first;
    for (int i = 0; i < 15; ++i) last = learner.step(batch).loss;
    EXPECT_LT(last, 0.8 * first) << plan;
    EXPECT_EQ(learner.optimizer().step(), 16);
  }
}

TEST(Learner, StepForwardWeightsAreTheSamplersPreparationOfTheMasters) {
  ParamTable params(small_test_config(true));
  init_params(params, 12, 0.1f);
  Learner learner(params, config_for("mxfp8"));
  learner.step(random_batch(3, params.config().vocab_size, 13));
  const Model fresh(learner.params(), PrecisionPlan::resolve("mxfp8"));
  const auto a = learner.model().linears(), b = fresh.linears();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->codes, b[i]->codes) << a[i]->name;
    EXPECT_EQ(a[i]->mx_scales, b[i]->mx_scales) << a[i]->name;
    EXPECT_EQ(a[i]->bf16, b[i]->bf16) << a[i]->name;
  }
}

TEST(Learner, ForwardWeightsShipToASamplerWithIdenticalDigests) {
  ParamTable params(small_test_config(false));
  init_params(params, 14, 0.1f);
  Learner learner(params, config_for("mxfp8"));
  learner.step(random_batch(3, params.config().vocab_size, 15));
  const Model& ours = learner.model();
  const Model sampler = Model::from_shipment(params.config(), ours.plan(), ours.ship());
  const auto a = model_digests(ours), b = model_digests(sampler);
  EXPECT_EQ(a, b);
  int mx_codes = 0;
  for (const TensorDigest& d : a) mx_codes += d.part == "codes" && d.dtype == "F8_E4M3";
  EXPECT_EQ(mx_codes, 7 * params.config().num_hidden_layers) << "q k v o gate up down as MX codes + scales";
  // A step later the masters moved, and so do the forward weights' digests.
  learner.step(random_batch(3, params.config().vocab_size, 16));
  EXPECT_NE(model_digests(learner.model()), a);
}

// Per-token loss weights (what a policy-gradient loss uses): SFT is the case
// where every target weighs 1 / targets, bit for bit; the gradient is linear in
// the weights (x2 is exact: a power of two moves every value and MX scale).
TEST_P(LearnerPlans, LossWeightsOfOneOverTargetsAreSftBitwise) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 5, 0.2f);
  auto batch = random_batch(5, params.config().vocab_size, 8);
  std::vector<float> g_sft, g_w, g_2w;
  Learner a(params, config_for(plan, 64));
  const double l_sft = a.loss_and_grads(batch, g_sft);
  int64_t targets = 0;
  for (const Sequence& s : batch) targets += s.num_targets();
  for (Sequence& s : batch) s.weight.assign(s.tokens.size(), 1.0f / static_cast<float>(targets));
  Learner b(params, config_for(plan, 64));
  const double l_w = b.loss_and_grads(batch, g_w);
  EXPECT_EQ(0, std::memcmp(g_sft.data(), g_w.data(), g_sft.size() * sizeof(float))) << plan;
  EXPECT_NEAR(l_w, l_sft, 1e-6 * std::fabs(l_sft));
  for (Sequence& s : batch)
    for (float& w : s.weight) w *= 2.0f;
  Learner c(params, config_for(plan, 64));
  c.loss_and_grads(batch, g_2w);
  for (size_t i = 0; i < g_w.size(); ++i) ASSERT_EQ(g_2w[i], 2.0f * g_w[i]) << plan << " " << i;
}

TEST(Learner, RejectsMalformedBatches) {
  ParamTable params(small_test_config(false));
  init_params(params, 1);
  Learner learner(params, config_for("bf16"));
  std::vector<float> g;
  Sequence s{{1, 2, 3}, {0, 1}, {}};
  EXPECT_THROW(learner.loss_and_grads({s}, g), Error);
  s.target = {1, 1, 1};
  EXPECT_THROW(learner.loss_and_grads({s}, g), Error);
  s.target = {0, 0, 0};
  EXPECT_THROW(learner.loss_and_grads({s}, g), Error);  // no targets
  s.target = {0, 1, 1};
  s.weight = {1.0f, 1.0f};  // one per token
  EXPECT_THROW(learner.loss_and_grads({s}, g), Error);
  s.weight = {0.0f, 1.0f, std::nanf("")};
  EXPECT_THROW(learner.loss_and_grads({s}, g), Error);
  s.weight = {0.0f, 1.0f, 1.0f};
  Sequence plain{{1, 2, 3}, {0, 1, 1}, {}};
  EXPECT_THROW(learner.loss_and_grads({s, plain}, g), Error);  // weights on some sequences only
  EXPECT_THROW(Learner(params, config_for("mxfp8+fp8kv")), Error);
  EXPECT_THROW(Learner(params, config_for("fp8-tensor")).loss_and_grads({{{1, 2}, {0, 1}, {}}}, g), Error);
}

TEST(Learner, PacksMicroBatchesInOrderWithinTheBudget) {
  std::vector<Sequence> seqs;
  for (int len : {5, 3, 8, 2, 9, 1}) seqs.push_back({std::vector<int32_t>(len, 1), std::vector<uint8_t>(len, 0), {}});
  const auto mb = pack_micro_batches(seqs, 8);
  const std::vector<std::vector<size_t>> want = {{0, 1}, {2}, {3}, {4}, {5}};
  EXPECT_EQ(mb, want);
  EXPECT_THROW(pack_micro_batches(seqs, 0), Error);
}

}  // namespace
}  // namespace mxrl

namespace mxrl {
namespace {
// The pairwise tree on scalars: the sum of the padded tree computed by
// recursion equals the binary counter's, for every count; and -0 stays -0
// (an absent sibling is not a +0).
float tree_ref(const std::vector<float>& x, int64_t lo, int64_t hi) {
  if (lo >= static_cast<int64_t>(x.size())) return std::nanf("");  // absent
  if (hi - lo == 1) return x[static_cast<size_t>(lo)];
  const int64_t mid = (lo + hi) / 2;
  const float a = tree_ref(x, lo, mid), b = tree_ref(x, mid, hi);
  return std::isnan(b) ? a : a + b;
}

TEST(GradTree, BinaryCounterIsThePaddedPairwiseTree) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1e3f, 1e3f);
  for (int64_t m = 1; m <= 40; ++m) {
    std::vector<float> x(static_cast<size_t>(m));
    for (float& v : x) v = d(rng) * std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);
    int64_t w = 1;
    while (w < m) w *= 2;
    PairwiseSum s;
    for (float v : x) s.add({v});
    const float got = s.finish().at(0), want = tree_ref(x, 0, w);
    EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << m;
    for (int ranks = 1; ranks <= 6; ++ranks) {
      const GradTree t(m, ranks);
      int64_t covered = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto [a, b] = t.roots_of(r, ranks);
        for (int64_t j = a; j < b; ++j) {
          const auto [l0, l1] = t.leaves_of(j);
          EXPECT_EQ(l0, std::min(m, covered));
          covered = std::max(covered, l1);
        }
      }
      EXPECT_EQ(covered, m);
    }
  }
  PairwiseSum z;
  z.add({-0.0f});
  EXPECT_TRUE(std::signbit(z.finish().at(0)));
}
}  // namespace
}  // namespace mxrl
