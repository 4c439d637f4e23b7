// The rollout engine: agreement with the scorer, independence from batch
// composition, budget and threads, finish reasons, versioned weights, prefix
// sharing (bitwise invisible, never across versions), recorded logits and the
// introspection a freshness check reads.
#include "sampler/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "model/digest.h"
#include "model/init.h"
#include "model/score.h"
#include "testing/small_config.h"
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
  std::sort(s.begin(), s.end(),
            [](const auto& a, const auto& b) { return std::tie(a.request, a.index) < std::tie(b.request, b.index); });
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
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values("fp32", "bf16", "mxfp8", "mxfp8-half", "mxfp8+fp8kv")),
                         [](const auto& info) {
                           std::string n =
                               std::string(std::get<0>(info.param) ? "moe_" : "dense_") + std::get<1>(info.param);
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

// Requests for GRPO-like batches: n = 4..8, mixed prompt lengths, two
// requests sharing one prompt, one with stop tokens.
std::vector<GenerationRequest> grouped_requests(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.id = 200 + i;
    const int len = i == 4 ? static_cast<int>(out[1].prompt.size()) : 1 + static_cast<int>(rng() % 17);
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    if (i == 4) r.prompt = out[1].prompt;  // the same prompt as request 201
    r.n = 4 + i % 5;
    r.max_new_tokens = 3 + (i * 5) % 9;
    r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
    if (i == 2) r.stop_tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    r.seed = 11;
    out.push_back(r);
  }
  return out;
}

// Every sample's tokens were generated under its own version.
void expect_versions(const Samples& all) {
  for (const auto& s : all) {
    ASSERT_EQ(s.token_versions.size(), s.tokens.size());
    for (uint64_t v : s.token_versions) EXPECT_EQ(v, s.version);
  }
}

void expect_same_logits(const Samples& a, const Samples& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].logits.size(), b[i].logits.size()) << what;
    EXPECT_EQ(std::memcmp(a[i].logits.data(), b[i].logits.data(), a[i].logits.size() * sizeof(float)), 0)
        << what << " sample " << i;
  }
}

int64_t count_kind(const std::vector<DerivedObject>& objs, const std::string& kind) {
  return std::count_if(objs.begin(), objs.end(), [&](const DerivedObject& o) { return o.kind == kind; });
}

class EngineSharing : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(EngineSharing, PrefixSharingIsBitwiseInvisible) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 7, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::resolve(plan));
  const auto reqs = grouped_requests(params.config().vocab_size, 5);
  EngineOptions off;
  off.prefix_sharing = false;
  off.record_logits = true;
  const Samples base = generate(model, reqs, off);
  size_t expected = 0;
  for (const auto& r : reqs) expected += r.n;
  ASSERT_EQ(base.size(), expected);
  expect_versions(base);
  ThreadPool pool(3);
  // Budgets from "everything at once" down to one sample (plus its prefix) at a time.
  for (int64_t budget : {int64_t{1} << 20, int64_t{90}, int64_t{40}, int64_t{30}})
    for (int64_t prefill : {int64_t{4096}, int64_t{17}})
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        EngineOptions on{budget, prefill, true, true};
        const std::string what = fmt::format("budget {} prefill {} threads {}", budget, prefill, p ? 3 : 1);
        const Samples got = generate(model, reqs, on, p);
        expect_same(base, got, what);
        expect_same_logits(base, got, what);
        expect_versions(got);
        EngineOptions plain = on;
        plain.prefix_sharing = false;
        if (budget == 30) expect_same(base, generate(model, reqs, plain, p), what + " unshared");
      }
}

INSTANTIATE_TEST_SUITE_P(Plans, EngineSharing,
                         ::testing::Values(std::make_tuple(false, std::string("mxfp8")),
                                           std::make_tuple(false, std::string("mxfp8+fp8kv")),
                                           std::make_tuple(true, std::string("mxfp8"))),
                         [](const auto& info) {
                           std::string n =
                               std::string(std::get<0>(info.param) ? "moe_" : "dense_") + std::get<1>(info.param);
                           for (char& ch : n)
                             if (ch == '-' || ch == '+') ch = '_';
                           return n;
                         });

TEST(Engine, PrefixEntriesAreSharedAndFreed) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::named("mxfp8"));
  GenerationRequest r;
  r.prompt = {4, 5, 6, 7, 8};
  r.n = 4;
  r.max_new_tokens = 6;
  // Room for the prefix entry (5) and two samples (11 each): staggered admission.
  Engine e(model, 3, {27, 4096});
  e.submit(r);
  r.id = 1;
  e.submit(r);  // a second request with the same prompt shares the entry
  EXPECT_TRUE(e.step().empty());
  auto objs = e.derived_objects();
  EXPECT_EQ(count_kind(objs, "plan"), 1);
  EXPECT_EQ(count_kind(objs, "prefix"), 1);  // one entry for both requests
  EXPECT_EQ(count_kind(objs, "kv"), 2);
  EXPECT_EQ(e.waiting(), 6);
  for (const auto& o : objs) {
    EXPECT_EQ(o.version, 3u) << o.kind << " " << o.name;
    EXPECT_EQ(o.epoch, 0u) << o.kind << " " << o.name;
  }
  EXPECT_TRUE(e.plan_is_live());
  EXPECT_EQ(e.decode_plan().model, e.shared_model());
  // Once no waiting sample can use it, the entry is freed.
  Samples all;
  while (!e.idle()) {
    for (auto& s : e.step()) all.push_back(std::move(s));
    if (e.waiting() == 0) {
      EXPECT_EQ(count_kind(e.derived_objects(), "prefix"), 0);
    }
  }
  EXPECT_EQ(all.size(), 8u);
  expect_versions(all);
  objs = e.derived_objects();
  ASSERT_EQ(objs.size(), 1u);
  EXPECT_EQ(objs[0].kind, "plan");
}

TEST(Engine, APromptOnlyOneSampleNeedsGetsNoEntry) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  auto model = std::make_shared<const Model>(params, PrecisionPlan::named("mxfp8"));
  GenerationRequest a;
  a.prompt = {4, 5, 6, 7, 8};
  a.n = 1;
  a.max_new_tokens = 4;
  GenerationRequest b = a;
  b.id = 1;
  b.prompt = {9, 10, 11};
  b.n = 2;  // two samples: one entry for both
  // Room for a (9) beside one sample of b (7) and b's entry (3), not for an
  // entry of a's prompt (5) too: a prefills its own slot, b's entry waits
  // for b's second sample.
  Engine e(model, 1, {19, 4096});
  e.submit(a);
  e.submit(b);
  EXPECT_TRUE(e.step().empty());
  const auto objs = e.derived_objects();
  EXPECT_EQ(count_kind(objs, "prefix"), 1);
  EXPECT_EQ(count_kind(objs, "kv"), 2);
  EXPECT_EQ(e.waiting(), 1);
  Samples all;
  while (!e.idle())
    for (auto& s : e.step()) all.push_back(std::move(s));
  std::sort(all.begin(), all.end(),
            [](const auto& x, const auto& y) { return std::tie(x.request, x.index) < std::tie(y.request, y.index); });
  EngineOptions off;
  off.prefix_sharing = false;
  expect_same(generate(model, {a, b}, off), all, "sharing off");
}

TEST(Engine, PrefixEntriesNeverCrossAVersion) {
  ParamTable v1(small_test_config(false)), v2(small_test_config(false));
  init_params(v1, 1, 0.2f);
  init_params(v2, 2, 0.2f);
  const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
  auto m2 = std::make_shared<const Model>(v2, plan);
  GenerationRequest a;
  a.id = 0;
  a.prompt = {9, 10, 11, 12};
  a.n = 3;
  a.max_new_tokens = 5;
  GenerationRequest b = a;
  b.id = 1;
  b.n = 2;
  // One sample (9) and the prefix entry (4) at a time.
  Engine e(std::make_shared<const Model>(v1, plan), 1, {13, 4096, true, true});
  e.submit(a);
  e.step();
  auto objs = e.derived_objects();
  ASSERT_EQ(count_kind(objs, "prefix"), 1);  // from version 1, two samples of `a` still waiting
  for (const auto& o : objs) EXPECT_EQ(o.version, 1u);
  e.stage(m2, 2);
  e.submit(b);  // the same prompt, submitted after the update was staged
  Samples out;
  bool swapped = false;
  while (!e.idle()) {
    for (auto& s : e.step()) out.push_back(std::move(s));
    if (e.version() == 2 && !swapped) {
      swapped = true;
      for (const auto& o : e.derived_objects()) {
        EXPECT_EQ(o.version, 2u) << o.kind << " " << o.name;
        EXPECT_EQ(o.epoch, 1u) << o.kind << " " << o.name;
      }
    }
  }
  EXPECT_TRUE(swapped);
  ASSERT_EQ(out.size(), 5u);
  expect_versions(out);
  std::sort(out.begin(), out.end(),
            [](const auto& x, const auto& y) { return std::tie(x.request, x.index) < std::tie(y.request, y.index); });
  EXPECT_EQ(out[0].version, 1u);  // sample 0 of `a` was in flight at the stage
  // Everything else is what a fresh engine on version 2 generates.
  Samples fresh = generate(m2, {a, b}, {1 << 20, 4096, false, true});
  Samples later(out.begin() + 1, out.end()), fresh_later(fresh.begin() + 1, fresh.end());
  for (const auto& s : later) EXPECT_EQ(s.version, 2u);
  expect_same(fresh_later, later, "after the swap");
  expect_same_logits(fresh_later, later, "after the swap");
}

TEST(Engine, RecordedLogitsAreTheModelsLogits) {
  for (bool sharing : {true, false}) {
    ParamTable params(small_test_config(true));
    init_params(params, 5, 0.2f);
    auto model = std::make_shared<const Model>(params, PrecisionPlan::named("mxfp8"));
    GenerationRequest r;
    r.prompt = {3, 1, 4, 1, 5, 9};
    r.n = 3;
    r.max_new_tokens = 7;
    r.sampling.temperature = 0.7f;
    r.sampling.top_k = 10;
    Engine e(model, 1, {1 << 20, 4096, sharing, true});
    e.submit(r);
    const Samples out = e.run();
    const int64_t V = model->config().vocab_size, P = static_cast<int64_t>(r.prompt.size());
    for (const auto& s : out) {
      std::vector<int32_t> seq = r.prompt;
      seq.insert(seq.end(), s.tokens.begin(), s.tokens.end());
      const std::vector<float> ref = e.sequence_logits(seq);
      ASSERT_EQ(s.logits.size(), s.tokens.size() * V);
      EXPECT_EQ(std::memcmp(s.logits.data(), &ref[(P - 1) * V], s.logits.size() * sizeof(float)), 0)
          << "sharing " << sharing << " sample " << s.index;
      EXPECT_EQ(ref, sequence_logits(*model, seq));
    }
  }
  // Off by default.
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  GenerationRequest r;
  r.prompt = {1, 2};
  r.max_new_tokens = 3;
  for (const auto& s : generate(std::make_shared<const Model>(params, PrecisionPlan::named("bf16")), {r}))
    EXPECT_TRUE(s.logits.empty());
}

TEST(Engine, SwapNowSemantics) {
  ParamTable v1(small_test_config(false)), v2(small_test_config(false));
  init_params(v1, 1, 0.2f);
  init_params(v2, 2, 0.2f);
  const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
  auto m1 = std::make_shared<const Model>(v1, plan), m2 = std::make_shared<const Model>(v2, plan);
  Engine e(m1, 1);
  EXPECT_FALSE(e.swap_now());  // nothing staged
  GenerationRequest r;
  r.prompt = {7, 8, 9};
  r.n = 2;
  r.max_new_tokens = 4;
  e.submit(r);
  e.step();
  e.stage(m2, 2);
  EXPECT_TRUE(e.update_pending());
  EXPECT_EQ(e.staged_version(), 2u);
  EXPECT_FALSE(e.swap_now());  // samples in flight: version 1 keeps serving, whole
  EXPECT_EQ(e.version(), 1u);
  EXPECT_EQ(e.shared_model(), m1);
  EXPECT_EQ(e.decode_plan().version, 1u);
  while (e.running() > 0) e.step();
  r.id = 5;
  e.submit(r);  // waiting, not admitted while the update is staged
  EXPECT_EQ(e.waiting(), 2);
  EXPECT_TRUE(e.swap_now());
  EXPECT_FALSE(e.update_pending());
  EXPECT_EQ(e.version(), 2u);
  EXPECT_EQ(e.cache_epoch(), 1u);
  EXPECT_EQ(e.shared_model(), m2);
  EXPECT_EQ(e.decode_plan().model, m2);
  EXPECT_EQ(e.decode_plan().version, 2u);
  EXPECT_TRUE(e.plan_is_live());
  const auto objs = e.derived_objects();
  ASSERT_EQ(objs.size(), 1u);  // only the rebound plan: no KV or prefix entry survives
  EXPECT_EQ(objs[0].version, 2u);
  EXPECT_FALSE(e.swap_now());
  // The engine's scoring path computes with the new weights.
  ScoreRequest sr{{7, 8, 9, 10, 11}, 2};
  EXPECT_EQ(e.score({sr}), score_sequences(*m2, {sr}));
  EXPECT_NE(e.score({sr}), score_sequences(*m1, {sr}));
  EXPECT_EQ(e.sequence_logits(sr.tokens), sequence_logits(*m2, sr.tokens));
  for (const auto& s : e.run()) EXPECT_EQ(s.version, 2u);
}

TEST(KvCache, CopyPrefixIsExact) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  const Model model(params, PrecisionPlan::resolve("mxfp8+fp8kv"));
  KvCache cache(model.config());
  const int a = cache.add_sequence(), b = cache.add_sequence();
  TokenBatch batch;
  for (int t = 0; t < 6; ++t) batch.add(t + 1, a, t);
  batch.add(40, b, 0);
  std::vector<float> logits(batch.size() * model.config().vocab_size);
  forward(model, cache, batch, logits.data());
  cache.copy_prefix(a, b, 4);
  EXPECT_EQ(cache.length(b), 4);
  const size_t bytes = 4 * cache.head_dim() * sizeof(float);
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l)
    for (int64_t g = 0; g < cache.groups(); ++g) {
      EXPECT_EQ(std::memcmp(cache.k(a, l, g, 0), cache.k(b, l, g, 0), bytes), 0);
      EXPECT_EQ(std::memcmp(cache.v(a, l, g, 0), cache.v(b, l, g, 0), bytes), 0);
    }
  // Growing a slot keeps every group's history.
  std::vector<float> before(cache.k(a, 1, 1, 0), cache.k(a, 1, 1, 0) + 6 * cache.head_dim());
  cache.reserve(a, 1000);
  EXPECT_EQ(std::memcmp(before.data(), cache.k(a, 1, 1, 0), before.size() * sizeof(float)), 0);
  EXPECT_THROW(cache.copy_prefix(a, b, 7), Error);
  EXPECT_THROW(cache.copy_prefix(a, a, 2), Error);
}

TEST(KvCache, ForwardGrowsSlotsAndRejectsBadPositions) {
  ParamTable params(small_test_config(false));
  init_params(params, 5, 0.2f);
  const Model model(params, PrecisionPlan::named("mxfp8"));
  KvCache cache(model.config());
  const int a = cache.add_sequence(), b = cache.add_sequence();
  std::vector<float> logits(16 * model.config().vocab_size);
  TokenBatch batch;  // the two slots' tokens interleaved
  for (int t = 0; t < 5; ++t) batch.add(t + 1, a, t), batch.add(t + 7, b, t);
  forward(model, cache, batch, logits.data());
  EXPECT_EQ(cache.length(a), 5);
  EXPECT_EQ(cache.length(b), 5);
  TokenBatch gap;
  gap.add(3, a, 6);  // position 5 is next
  EXPECT_THROW(forward(model, cache, gap, logits.data()), Error);
  TokenBatch stranger;
  stranger.add(3, 2, 0);  // no slot 2
  EXPECT_THROW(forward(model, cache, stranger, logits.data()), Error);
  EXPECT_EQ(cache.length(a), 5);
}

TEST(PackedWeight, FingerprintMatchesARepack) {
  for (const char* name : {"mxfp8", "bf16", "fp32", "fp8-block128"}) {
    ParamTable params(small_test_config(true));
    init_params(params, 5, 0.2f);
    const Model model(params, PrecisionPlan::named(name));
    std::set<uint64_t> seen;
    for (const PreparedLinear* lin : model.linears()) {
      PreparedLinear p = lin->payload();
      p.validate_and_pack({});
      EXPECT_EQ(p.packed.fingerprint(), lin->packed.fingerprint()) << name << " " << lin->name;
      seen.insert(lin->packed.fingerprint());
      if (!p.codes.empty()) p.codes[p.codes.size() / 2] ^= 1;
      if (!p.bf16.empty()) p.bf16[p.bf16.size() / 2] ^= 1;
      if (!p.f32.empty()) p.f32[p.f32.size() / 2] = -p.f32[p.f32.size() / 2] + 1.0f;
      p.validate_and_pack({});
      EXPECT_NE(p.packed.fingerprint(), lin->packed.fingerprint()) << name << " " << lin->name;
    }
    EXPECT_EQ(seen.size(), model.linears().size()) << name;  // different weights, different prints
  }
}

}  // namespace
}  // namespace mxrl
