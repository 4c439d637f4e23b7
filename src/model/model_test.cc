// The model forward: batch invariance across plans, prefill vs decode,
// threads; checkpoints round trips; and agreement with Hugging Face
// transformers on committed fixtures (tests/data/qwen3-tiny-*).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/forward.h"
#include "model/init.h"
#include "model/moe.h"
#include "model/score.h"
#include "testing/small_config.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;

std::vector<ScoreRequest> random_requests(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ScoreRequest> reqs;
  for (int i = 0; i < n; ++i) {
    ScoreRequest r;
    const int len = 3 + static_cast<int>(rng() % 38);
    for (int t = 0; t < len; ++t) r.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    r.prompt_len = 1 + static_cast<int64_t>(rng() % (len - 1));
    reqs.push_back(r);
  }
  return reqs;
}

void expect_bitwise(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                    const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " seq " << i;
    for (size_t t = 0; t < a[i].size(); ++t)
      ASSERT_EQ(f32_bits(a[i][t]), f32_bits(b[i][t])) << what << " seq " << i << " token " << t;
  }
}

class BatchInvariance : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(BatchInvariance, LogprobsDoNotDependOnBatchingDecodeOrThreads) {
  const auto [moe, plan] = GetParam();
  ParamTable params(small_test_config(moe));
  init_params(params, 7, 0.2f);
  const Model model(params, PrecisionPlan::resolve(plan));
  const auto reqs = random_requests(6, params.config().vocab_size, 11);
  const auto together = score_sequences(model, reqs);
  // Each sequence alone.
  std::vector<std::vector<float>> alone;
  for (const auto& r : reqs) alone.push_back(score_sequences(model, {r})[0]);
  expect_bitwise(together, alone, "alone");
  // One token per sequence per call (decode), on 3 threads.
  ThreadPool pool(3);
  expect_bitwise(together, score_sequences(model, reqs, {4096, 1}, {&pool}), "decode");
  // Ragged packing: 7 tokens per call, chunks of 5.
  expect_bitwise(together, score_sequences(model, reqs, {7, 5}, {&pool}), "ragged");
  // Every kernel on the scalar reference backend (GEMM and the other ops alike
  // follow Exec::backend), and on AVX-512 where the CPU has it.
  for (Backend be : {Backend::Scalar, Backend::Avx512})
    expect_bitwise(together, score_sequences(model, reqs, {4096, 0}, {&pool, be}), backend_name(be));
  // Reversed order of the file.
  auto rev = reqs;
  std::reverse(rev.begin(), rev.end());
  auto out_rev = score_sequences(model, rev);
  std::reverse(out_rev.begin(), out_rev.end());
  expect_bitwise(together, out_rev, "reversed");
  // Sanity: log-probs are finite and negative.
  for (const auto& s : together)
    for (float lp : s) EXPECT_TRUE(std::isfinite(lp) && lp <= 0) << lp;
}

INSTANTIATE_TEST_SUITE_P(Plans, BatchInvariance,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values("fp32", "bf16", "mxfp8", "mxfp8-half", "mxfp8-floor",
                                                              "fp8-block128", "fp8-tensor", "mxfp8+fp8kv")),
                         [](const auto& info) {
                           std::string n =
                               std::string(std::get<0>(info.param) ? "moe_" : "dense_") + std::get<1>(info.param);
                           for (char& ch : n)
                             if (ch == '-' || ch == '+') ch = '_';
                           return n;
                         });

TEST(Model, PlansChangeResultsButStayClose) {
  ParamTable params(small_test_config(false));
  init_params(params, 3, 0.2f);
  const auto reqs = random_requests(3, params.config().vocab_size, 5);
  const auto f32 = score_sequences(Model(params, PrecisionPlan::named("fp32")), reqs);
  std::map<std::string, double> mean_diff;
  for (const char* plan : {"bf16", "mxfp8", "fp8-block128", "mxfp8+fp8kv"}) {
    const auto q = score_sequences(Model(params, PrecisionPlan::resolve(plan)), reqs);
    double sum = 0;
    int64_t n = 0;
    for (size_t i = 0; i < f32.size(); ++i)
      for (size_t t = 0; t < f32[i].size(); ++t, ++n) sum += std::fabs(f32[i][t] - q[i][t]);
    mean_diff[plan] = sum / n;
    std::printf("mean |logprob(%s) - logprob(fp32)| = %.4g\n", plan, mean_diff[plan]);
    EXPECT_GT(mean_diff[plan], 0) << plan;
    EXPECT_LT(mean_diff[plan], 0.5) << plan;  // random std-0.2 weights amplify rounding
  }
  // 3 mantissa bits lose more than 8.
  EXPECT_LT(mean_diff["bf16"], mean_diff["mxfp8"]);
  EXPECT_NE(mean_diff["mxfp8+fp8kv"], mean_diff["mxfp8"]);  // the FP8 cache is not a no-op
}

// moe_experts (the loop mxrl.ops.MoeExperts runs too) on a traced pass's
// post-attention norm and routing reproduces the layer's output bit for bit.
TEST(Model, MoeExpertsAloneGiveTheLayersOutput) {
  ParamTable params(small_test_config(true));
  init_params(params, 7, 0.2f);
  const Model model(params, PrecisionPlan::named("mxfp8"));
  const ModelConfig& c = model.config();
  KvCache cache(c);
  const int s = cache.add_sequence();
  TokenBatch b;
  for (int64_t i = 0; i < 11; ++i) b.add(static_cast<int32_t>((i * 7 + 3) % c.vocab_size), s, i);
  const int64_t n = b.size(), H = c.hidden_size;
  std::vector<float> logits(n * c.vocab_size);
  ForwardTrace trace;
  ThreadPool pool(3);
  forward(model, cache, b, logits.data(), {&pool}, nullptr, &trace);
  int moe_layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const PreparedLayer& L = model.layer(l);
    const LayerTrace& t = trace.layers[l];
    if (!L.moe) continue;
    ++moe_layers;
    std::vector<ExpertLinears> ls;
    for (size_t e = 0; e < L.expert_gate.size(); ++e)
      ls.push_back({&L.expert_gate[e], &L.expert_up[e], &L.expert_down[e]});
    std::vector<float> y(n * H);
    ForwardWorkspace ws;
    moe_experts(ls, t.xn2.data(), n, H, t.experts.data(), t.weights.data(), c.num_experts_per_tok, y.data(), ws, {});
    const std::vector<float>& out = l + 1 < c.num_hidden_layers ? trace.layers[l + 1].x_in : trace.x_final;
    for (int64_t i = 0; i < n * H; ++i)
      ASSERT_EQ(f32_bits(t.x_mid[i] + y[i]), f32_bits(out[i])) << "layer " << l << " element " << i;
  }
  EXPECT_GT(moe_layers, 0);
}

TEST(Model, MxfpPlanNeedsKMultipleOf32) {
  ModelConfig c = small_test_config(false);
  c.hidden_size = 48;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 24;
  ParamTable params(c);
  init_params(params, 1);
  try {
    Model m(params, PrecisionPlan::named("mxfp8"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << e.what();
  }
  Model ok(params, PrecisionPlan::named("bf16"));  // no MX, no constraint
}

// ---- Hugging Face fixtures ----

std::string fixture(const std::string& name) { return std::string(MXRL_SOURCE_DIR) + "/tests/data/" + name; }

struct Reference {
  std::vector<int32_t> tokens;  // [B, T]
  std::vector<float> logits;    // [B, T, V]
  int64_t batch = 0, len = 0, vocab = 0;
};

Reference load_reference(const std::string& dir) {
  const SafetensorsFile f = SafetensorsFile::open(dir + "/reference.safetensors");
  Reference r;
  const auto& t = f.at("tokens");
  const auto& l = f.at("logits");
  r.batch = t.shape[0], r.len = t.shape[1], r.vocab = l.shape[2];
  r.tokens.resize(t.numel());
  std::memcpy(r.tokens.data(), t.data.data(), t.data.size());
  r.logits.resize(l.numel());
  std::memcpy(r.logits.data(), l.data.data(), l.data.size());
  return r;
}

void expect_matches_transformers(const std::string& name, double tol) {
  const std::string dir = fixture(name);
  ASSERT_TRUE(fs::exists(dir + "/config.json")) << dir;
  const Checkpoint ck = load_checkpoint(dir);
  const Reference ref = load_reference(dir);
  const Model model(ck.params, PrecisionPlan::named("fp32"));
  double worst = 0;
  for (int64_t b = 0; b < ref.batch; ++b) {
    const std::vector<int32_t> toks(ref.tokens.begin() + b * ref.len, ref.tokens.begin() + (b + 1) * ref.len);
    const auto logits = sequence_logits(model, toks);
    for (int64_t i = 0; i < ref.len * ref.vocab; ++i)
      worst = std::max(worst, std::fabs(double(logits[i]) - ref.logits[b * ref.len * ref.vocab + i]));
  }
  EXPECT_LE(worst, tol) << name;
  ::testing::Test::RecordProperty("max_abs_logit_error_" + name, std::to_string(worst));
  std::printf("%s: max |logit - transformers| = %.3g\n", name.c_str(), worst);
}

// config.json exactly as transformers 5.25 saves it (rope_parameters, num_local_experts, dtype).
TEST(Fixtures, DenseFp32LogitsMatchTransformers) { expect_matches_transformers("qwen3-tiny-dense", 1e-4); }
TEST(Fixtures, MoeFp32LogitsMatchTransformers) { expect_matches_transformers("qwen3-tiny-moe", 1e-4); }
TEST(Fixtures, DenseBf16CheckpointLogitsMatchTransformers) {
  expect_matches_transformers("qwen3-tiny-dense-bf16", 1e-4);
}
// The same weights saved by transformers 4.57 (top-level rope_theta, rope_scaling null, num_experts).
TEST(Fixtures, Transformers4DenseLogitsMatch) { expect_matches_transformers("qwen3-tiny-dense-hf4", 1e-4); }
TEST(Fixtures, Transformers4MoeLogitsMatch) { expect_matches_transformers("qwen3-tiny-moe-hf4", 1e-4); }

// The fixtures have teeth: read with the RoPE base mxrl used to fall back to
// (10000, where they say 5e5 / 1e6), the logits are far off.
TEST(Fixtures, AWrongRopeBaseIsCaught) {
  for (const char* name : {"qwen3-tiny-dense", "qwen3-tiny-moe"}) {
    Checkpoint ck = load_checkpoint(fixture(name));
    ASSERT_NE(ck.config.rope_theta, 10000.0) << name;
    ModelConfig wrong = ck.config;
    wrong.rope_theta = 10000.0;
    ParamTable params(wrong);
    params.storage() = ck.params.storage();
    const Reference ref = load_reference(fixture(name));
    const Model model(params, PrecisionPlan::named("fp32"));
    const std::vector<int32_t> toks(ref.tokens.begin(), ref.tokens.begin() + ref.len);
    const auto logits = sequence_logits(model, toks);
    double worst = 0;
    for (int64_t i = 0; i < ref.len * ref.vocab; ++i)
      worst = std::max(worst, std::fabs(double(logits[i]) - ref.logits[i]));
    EXPECT_GT(worst, 1e-2) << name;
  }
}

TEST(Fixtures, CheckpointsResaveUnchanged) {
  for (const char* name :
       {"qwen3-tiny-dense", "qwen3-tiny-moe", "qwen3-tiny-dense-bf16", "qwen3-tiny-dense-hf4", "qwen3-tiny-moe-hf4"}) {
    const Checkpoint a = load_checkpoint(fixture(name));
    const fs::path out = fs::temp_directory_path() / ("mxrl_resave_" + std::to_string(::getpid()));
    save_checkpoint(out.string(), a);
    const Checkpoint b = load_checkpoint(out.string());
    EXPECT_EQ(a.params.storage(), b.params.storage()) << name;
    EXPECT_EQ(a.shard_of, b.shard_of) << name;
    EXPECT_EQ(a.dtype, b.dtype) << name;
    EXPECT_EQ(a.config.to_json(), b.config.to_json()) << name;
    // Tensor bytes are identical file for file.
    for (const auto& entry : fs::directory_iterator(fixture(name))) {
      const std::string fn = entry.path().filename().string();
      if (fn.rfind("model", 0) != 0 || entry.path().extension() != ".safetensors") continue;
      const SafetensorsFile fa = SafetensorsFile::open(entry.path().string());
      const SafetensorsFile fb = SafetensorsFile::open((out / fn).string());
      for (const auto& t : fa.tensors()) {
        const auto& u = fb.at(t.name);
        EXPECT_EQ(t.dtype, u.dtype);
        EXPECT_EQ(t.shape, u.shape);
        EXPECT_TRUE(t.data.size() == u.data.size() && std::memcmp(t.data.data(), u.data.data(), t.data.size()) == 0)
            << name << " " << t.name;
      }
    }
    fs::remove_all(out);
  }
}

TEST(Fixtures, LoadErrorsNameTheTensor) {
  const Checkpoint ck = load_checkpoint(fixture("qwen3-tiny-dense"));
  const fs::path dir = fs::temp_directory_path() / ("mxrl_bad_" + std::to_string(::getpid()));
  auto expect_error = [&](auto mutate, const std::string& phrase) {
    fs::remove_all(dir);
    save_checkpoint(dir.string(), ck);
    const SafetensorsFile f = SafetensorsFile::open((dir / "model.safetensors").string());
    SafetensorsWriter w;
    for (const auto& t : f.tensors()) w.add_view(t.name, t.dtype, t.shape, t.data);
    mutate(f, w);
    w.write((dir / "model2.safetensors").string());
    fs::rename(dir / "model2.safetensors", dir / "model.safetensors");
    try {
      load_checkpoint(dir.string());
      ADD_FAILURE() << "no error for " << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  // Each mutation rebuilds the writer from scratch.
  auto rebuild = [&](const SafetensorsFile& f, SafetensorsWriter& w, const std::string& skip, bool reshape) {
    w = SafetensorsWriter();
    for (const auto& t : f.tensors()) {
      if (t.name == skip && !reshape) continue;
      auto shape = t.shape;
      if (t.name == skip) shape = {shape[0] * shape[1]};
      w.add_view(t.name, t.dtype, shape, t.data);
    }
  };
  expect_error([&](const SafetensorsFile& f,
                   SafetensorsWriter& w) { rebuild(f, w, "model.layers.1.mlp.up_proj.weight", false); },
               "missing tensor 'model.layers.1.mlp.up_proj.weight'");
  expect_error([&](const SafetensorsFile& f,
                   SafetensorsWriter& w) { rebuild(f, w, "model.layers.0.self_attn.k_proj.weight", true); },
               "tensor 'model.layers.0.self_attn.k_proj.weight' has shape");
  expect_error(
      [&](const SafetensorsFile& f, SafetensorsWriter& w) {
        rebuild(f, w, "", false);
        w.add("model.layers.9.mlp.gate_proj.weight", DType::F32, {1}, std::vector<std::byte>(4));
      },
      "unexpected tensor 'model.layers.9.mlp.gate_proj.weight'");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mxrl
