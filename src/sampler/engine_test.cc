// The rollout engine: agreement with the scorer, independence from batch
// composition, budget and threads, finish reasons, and versioned weights.
#include "sampler/engine.h"

#include <gtest/gtest.h>

#include <random>

#include "model/digest.h"
#include "model/init.h"
#include "model/score.h"
#include "model/test_models.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

std::vector<GenerationRequest> requests(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.id = 100 + i;
    const int len = 1 + static_cast<int>(rng() % 20);
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    r.n = 1 + i % 3;
    r.max_new_tokens = 4 + i * 3;
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
    r.sampling.top_k = i == 3 ? 5 : 0;
    if (i == 2) r.stop_tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    r.seed = 42;
    out.push_back(r);
  }
  return out;
}

using Samples = std::vector<GeneratedSample>;

Samples generate(std::shared_ptr<const Model> m, const std::vector<GenerationRequest>& reqs, EngineOptions opt = {},
                 ThreadPool* pool = nullptr) {
  Engine e(std::move(m), 1, opt, {pool});
  for (const auto& r : reqs) e.submit(r);
  Samples s = e.run();
  std::sort(s.begin(), s.end(), [](const auto& a, const auto& b) {
    return std::tie(a.request, a.index) < std::tie(b.request, b.index);
  });
  return s;
}

void expect_same(const Samples& a, const Samples& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].request, b[i].request) << what;
    EXPECT_EQ(a[i].index, b[i].index) << what;
    EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " sample " << i;
    ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << what;
    for (size_t t = 0; t < a[i].logprobs.size(); ++t)
      EXPECT_EQ(f32_bits(a[i].logprobs[t]), f32_bits(b[i].logprobs[t])) << what << " sample " << i << " token " << t;
    EXPECT_EQ(a[i].finish, b[i].finish) << what;
  }
}

class EngineAgreement : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(EngineAgreement, LogprobsEqualScoreAndIgnoreBatching) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 5, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::resolve(plan));
  const auto reqs = requests(params.config().vocab_size, 3);
  const Samples all = generate(model, reqs);
  size_t expected = 0;
  for (const auto& r : reqs) expected += r.n;
  ASSERT_EQ(all.size(), expected);
  // Every sample's log-probs are what the scorer computes for its tokens.
  for (const auto& s : all) {
    const auto& r = reqs[s.request - 100];
    ScoreRequest sr{r.prompt, static_cast<int64_t>(r.prompt.size())};
    sr.tokens.insert(sr.tokens.end(), s.tokens.begin(), s.tokens.end());
    const auto lp = score_sequences(*model, {sr})[0];
    ASSERT_EQ(lp.size(), s.logprobs.size());
    for (size_t t = 0; t < lp.size(); ++t)
      ASSERT_EQ(f32_bits(lp[t]), f32_bits(s.logprobs[t])) << plan << " request " << s.request << " token " << t;
    EXPECT_EQ(s.version, 1u);
  }
  // Each request alone; a budget that makes requests wait; small prefills; 3 threads.
  Samples alone;
  for (const auto& r : reqs)
    for (auto& s : generate(model, {r})) alone.push_back(std::move(s));
  expect_same(all, alone, "alone");
  expect_same(all, generate(model, reqs, {40, 16}), "tight budget");
  ThreadPool pool(3);
  expect_same(all, generate(model, reqs, {}, &pool), "3 threads");
}

INSTANTIATE_TEST_SUITE_P(Plans, EngineAgreement,
                         ::testing::Combine(::testing::Bool(), ::testing::Values("fp32", "bf16", "mxfp8", "mxfp8-half", "mxfp8+fp8kv")),
                         [](const auto& info) {
                           std::string n = std::string(std::get<0>(info.param) ? "moe_" : "dense_") + std::get<1>(info.param);
                           for (char& ch : n)
                             if (ch == '-' || ch == '+') ch = '_';
                           return n;
                         });

TEST(Engine, SamplesDependOnSeedRequestAndIndex) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::named("bf16"));
  GenerationRequest r;
  r.prompt = {3, 4, 5};
  r.n = 3;
  r.max_new_tokens = 16;
  const Samples a = generate(model, {r});
  EXPECT_NE(a[0].tokens, a[1].tokens);  // sample index changes the stream
  r.seed = 9;
  EXPECT_NE(generate(model, {r})[0].tokens, a[0].tokens);
  r.seed = 0;
  r.id = 7;
  EXPECT_NE(generate(model, {r})[0].tokens, a[0].tokens);
  // Temperature: log-probs of logits / T, as token_logprob computes them.
  r.sampling.temperature = 0.5f;
  const Samples c = generate(model, {r});
  KvCache cache(model->config());
  const int slot = cache.add_sequence();
  TokenBatch b;
  std::vector<int32_t> seq = r.prompt;
  seq.insert(seq.end(), c[0].tokens.begin(), c[0].tokens.end() - 1);
  for (size_t t = 0; t < seq.size(); ++t) b.add(seq[t], slot, static_cast<int64_t>(t));
  std::vector<float> logits(seq.size() * model->config().vocab_size), scratch;
  forward(*model, cache, b, logits.data());
  for (size_t t = 0; t < c[0].tokens.size(); ++t) {
    const float* row = &logits[(r.prompt.size() - 1 + t) * model->config().vocab_size];
    EXPECT_EQ(f32_bits(token_logprob(row, model->config().vocab_size, 0.5f, c[0].tokens[t], scratch)),
              f32_bits(c[0].logprobs[t]));
  }
}

TEST(Engine, FinishReasonsAndValidation) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::named("fp32"));
  GenerationRequest r;
  r.prompt = {1, 2};
  r.max_new_tokens = 5;
  r.n = 4;
  for (const auto& s : generate(model, {r})) {
    EXPECT_EQ(s.tokens.size(), 5u);
    EXPECT_EQ(s.finish, FinishReason::Length);
  }
  for (int32_t t = 0; t < 96; ++t) r.stop_tokens.push_back(t);  // every token stops
  for (const auto& s : generate(model, {r})) {
    EXPECT_EQ(s.tokens.size(), 1u);
    EXPECT_EQ(s.finish, FinishReason::Stop);
  }
  Engine e(model, 1, {64, 64});
  auto bad = r;
  bad.prompt.clear();
  EXPECT_THROW(e.submit(bad), Error);
  bad = r;
  bad.prompt = {1, 96};
  EXPECT_THROW(e.submit(bad), Error);
  bad = r;
  bad.max_new_tokens = 100;  // 102 positions > budget 64
  EXPECT_THROW(e.submit(bad), Error);
  bad = r;
  bad.sampling.top_p = 0;
  EXPECT_THROW(e.submit(bad), Error);
  EXPECT_TRUE(e.idle());
}

TEST(Engine, UpdatesSwapAtomicallyBetweenSamples) {
  ParamTable v1(small_test_config(false)), v2(small_test_config(false));
  init_params(v1, 1, 0.2f);
  init_params(v2, 2, 0.2f);
  const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
  Engine e(std::make_shared<const Model>(v1, plan), 1);
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.max_new_tokens = 6;
  r.n = 2;
  e.submit(r);
  auto first = e.step();  // in flight under version 1
  EXPECT_TRUE(first.empty());
  // A failing update (MX needs K % 32 == 0) changes nothing.
  ModelConfig odd = small_test_config(false);
  odd.hidden_size = 48, odd.num_attention_heads = 2, odd.num_key_value_heads = 1, odd.head_dim = 24;
  ParamTable bad(odd);
  EXPECT_THROW(e.stage(bad, plan, 3), Error);
  EXPECT_FALSE(e.update_pending());
  e.stage(v2, plan, 2);
  r.id = 1;
  e.submit(r);  // must wait for the swap
  Samples out = e.run();
  ASSERT_EQ(out.size(), 4u);
  for (const auto& s : out) {
    EXPECT_EQ(s.version, s.request == 0 ? 1u : 2u);
    // Each sample agrees with the scorer under its own version's weights.
    const Model m(s.version == 1 ? v1 : v2, plan);
    ScoreRequest sr{r.prompt, 3};
    sr.tokens.insert(sr.tokens.end(), s.tokens.begin(), s.tokens.end());
    const auto lp = score_sequences(m, {sr})[0];
    for (size_t t = 0; t < lp.size(); ++t) EXPECT_EQ(f32_bits(lp[t]), f32_bits(s.logprobs[t]));
  }
  EXPECT_EQ(e.version(), 2u);
  EXPECT_EQ(e.cache_epoch(), 1u);
}


TEST(Engine, ShippedWeightsAreUsedByteForByte) {
  for (bool moe : {false, true}) {
    ParamTable v1(small_test_config(moe)), v2(small_test_config(moe));
    init_params(v1, 1, 0.2f);
    init_params(v2, 2, 0.2f);
    const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
    const Model learner(v2, plan);  // the learner's forward weights for version 2
    Engine e(std::make_shared<const Model>(v1, plan), 1);
    // Faulty shipments throw and leave version 1 serving.
    WeightShipment missing = learner.ship();
    missing.linears.erase(missing.linears.begin());
    EXPECT_THROW(e.stage(missing, 2), Error);
    WeightShipment regrid = learner.ship();
    regrid.linears.begin()->second.prec.rule = ScaleRule::Floor;
    EXPECT_THROW(e.stage(regrid, 2), Error);
    WeightShipment extra = learner.ship();
    extra.copies["model.layers.99.input_layernorm.weight"] = {1.0f};
    EXPECT_THROW(e.stage(extra, 2), Error);
    EXPECT_FALSE(e.update_pending());
    e.stage(learner.ship(), 2);
    GenerationRequest r;
    r.prompt = {9, 8, 7};
    r.max_new_tokens = 5;
    e.submit(r);
    const Samples out = e.run();
    EXPECT_EQ(e.version(), 2u);
    EXPECT_TRUE(compare_digests(model_digests(learner), model_digests(e.model())).empty());
    ScoreRequest sr{r.prompt, 3};
    sr.tokens.insert(sr.tokens.end(), out[0].tokens.begin(), out[0].tokens.end());
    const auto lp = score_sequences(learner, {sr})[0];
    for (size_t t = 0; t < lp.size(); ++t) EXPECT_EQ(f32_bits(lp[t]), f32_bits(out[0].logprobs[t]));
  }
}

}  // namespace
}  // namespace mxrl
