// Whole-model gradient check: the learner's FP32 loss and analytic gradients
// (plan "fp32", one micro-batch) against a double-precision reference written
// from the model's definition (testing/reference_model.h) and its central
// finite differences, on a sample of coordinates of every parameter tensor of
// small dense and MoE models, with and without the MoE load-balancing loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "learner/learner.h"
#include "model/init.h"
#include "testing/reference_model.h"
#include "testing/small_config.h"

namespace mxrl {
namespace {

using test::ReferenceModel;
using test::RefResult;

// Random init with a std large enough for sizeable gradients; norm weights
// around 1 (not exactly 1, so a backward that ignores them shows).
ParamTable make_params(const ModelConfig& c, uint64_t seed, float std) {
  ParamTable p(c);
  init_params(p, seed, std);
  std::mt19937_64 rng(seed * 7919 + 17);
  std::normal_distribution<float> nd(0.0f, 0.2f);
  p.for_each([&](const ParamInfo& info, float* w) {
    if (info.role == ParamRole::Norm)
      for (int64_t i = 0; i < info.numel; ++i) w[i] = 1.0f + nd(rng);
  });
  return p;
}

// Random sequences of the given lengths; random target flags (target[0] = 0,
// at least one target each).
std::vector<Sequence> make_batch(uint64_t seed, int64_t vocab, const std::vector<int>& lens) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::bernoulli_distribution is_target(0.7);
  std::vector<Sequence> out;
  for (int len : lens) {
    Sequence s;
    for (int i = 0; i < len; ++i) {
      s.tokens.push_back(tok(rng));
      s.target.push_back(i > 0 && is_target(rng) ? 1 : 0);
    }
    s.target[len - 1] = 1;
    out.push_back(std::move(s));
  }
  return out;
}

struct TensorStats {
  std::string name;
  int checked = 0;
  double max_fd = 0, max_g = 0, max_err = 0;  // the loss (ce + aux)
  double max_aux_fd = 0, max_aux_err = 0;     // the aux loss alone (aux runs)
};

struct CheckResult {
  double loss = 0, ref_ce = 0, aux = 0, ref_aux = 0, min_margin = 0;
  int checked = 0, skipped = 0;
  std::vector<TensorStats> tensors;
  std::vector<float> grads, grads_no_aux;  // the learner's (grads_no_aux: aux runs only)
  double worst_ratio = 0;                  // max over tensors of max_err / tolerance
  std::string worst_tensor;
};

constexpr double kStep = 1e-5;    // central differences of the double reference
constexpr double kRelTol = 1e-3;  // per tensor: max |fd - g| <= kRelTol * max |fd| + kAbsTol
constexpr double kAbsTol = 1e-6;

double tolerance(double max_fd) { return kRelTol * max_fd + kAbsTol; }

// micro_batch_tokens: the learner's budget (default: one micro-batch). With
// several, the aux loss is per micro-batch, token-weighted: the reference
// then adds sum over micro-batches of (tokens / all tokens) * aux(micro-batch).
CheckResult run_check(const char* label, const ModelConfig& c, uint64_t seed, float std, double aux_coef,
                      int per_tensor, const std::vector<int>& lens, int64_t micro_batch_tokens = 1 << 20) {
  CheckResult res;
  const ParamTable params = make_params(c, seed, std);
  const std::vector<Sequence> batch = make_batch(seed + 1000, c.vocab_size, lens);

  LearnerConfig lc;
  lc.recipe.plan = "fp32";
  lc.micro_batch_tokens = micro_batch_tokens;
  lc.aux_loss_coef = aux_coef;
  Learner learner(params, lc);
  StepResult info;
  res.loss = learner.loss_and_grads(batch, res.grads, &info);
  res.aux = info.aux_loss;
  const std::vector<std::vector<size_t>> mbs = pack_micro_batches(batch, micro_batch_tokens);
  EXPECT_EQ(info.micro_batches, static_cast<int64_t>(mbs.size()));
  if (aux_coef != 0.0) {
    LearnerConfig lc0 = lc;
    lc0.aux_loss_coef = 0.0;
    Learner learner0(params, lc0);
    learner0.loss_and_grads(batch, res.grads_no_aux);
  }

  // The reference: the whole batch (its aux loss too when one micro-batch
  // holds it), and each micro-batch for its aux loss otherwise.
  const bool split_aux = mbs.size() > 1 && aux_coef != 0.0;
  ReferenceModel ref(params);
  RefResult base = ref.prepare(batch, split_aux ? 0.0 : aux_coef);
  std::vector<ReferenceModel> mb_refs;
  std::vector<double> mb_weight;
  std::vector<RefResult> mb_base;
  if (split_aux) {
    int64_t all = 0;
    for (const Sequence& s : batch) all += static_cast<int64_t>(s.tokens.size());
    for (const auto& idx : mbs) {
      std::vector<Sequence> sub;
      int64_t n = 0;
      for (size_t i : idx) sub.push_back(batch[i]), n += static_cast<int64_t>(batch[i].tokens.size());
      mb_refs.emplace_back(params);
      mb_base.push_back(mb_refs.back().prepare(sub, aux_coef));
      mb_weight.push_back(static_cast<double>(n) / static_cast<double>(all));
      base.aux += mb_weight.back() * mb_base.back().aux;
    }
    base.loss = base.ce + base.aux;
  }
  // The loss (ce + aux) and the aux loss at weights()[i] += delta; false when
  // the step changes an expert choice.
  auto perturbed = [&](int64_t i, double delta, double& loss, double& aux) {
    const RefResult r = ref.perturbed(i, delta);
    bool same = r.routing == base.routing;
    loss = r.loss, aux = r.aux;
    for (size_t k = 0; k < mb_refs.size(); ++k) {
      const RefResult m = mb_refs[k].perturbed(i, delta);
      same = same && m.routing == mb_base[k].routing;
      loss += mb_weight[k] * m.aux, aux += mb_weight[k] * m.aux;
    }
    return same;
  };
  res.ref_ce = base.ce, res.ref_aux = base.aux, res.min_margin = base.min_margin;
  if (!split_aux) {  // the cached re-evaluation agrees with the plain one
    EXPECT_EQ(test::reference_loss(params, batch, aux_coef), base.loss);
    for (int t : {params.embed(), params.layer(c.num_hidden_layers - 1).q, params.final_norm()}) {
      const int64_t i = params.entries()[t].offset + params.entries()[t].numel / 2;
      std::vector<double> w = ref.weights();
      w[i] += 0.01;
      EXPECT_NEAR(test::reference_loss(params, batch, aux_coef, &w), ref.perturbed(i, 0.01).loss, 1e-12);
    }
  }
  EXPECT_NEAR(res.loss, base.ce, 1e-5 * std::abs(base.ce)) << label << ": learner fp32 loss vs reference";
  EXPECT_NEAR(res.aux, base.aux, 1e-5 * std::abs(base.aux) + 1e-12) << label << ": aux loss vs reference";
  if (c.is_moe()) {
    // Far from routing ties: the FP32 learner routes as the reference does.
    EXPECT_GT(base.min_margin, 1e-4) << label << ": a routing near-tie; choose another seed";
    for (size_t l = 0; l < base.expert_rows.size(); ++l)
      for (size_t e = 0; e < base.expert_rows[l].size(); ++e)
        EXPECT_GT(base.expert_rows[l][e], 0) << label << ": MoE layer #" << l << " expert " << e << " unused";
  }

  // The coordinates: per tensor, the one with the largest analytic gradient
  // and random others (embedding: rows of tokens in the batch).
  std::set<int32_t> used_tokens;
  for (const Sequence& s : batch) used_tokens.insert(s.tokens.begin(), s.tokens.end());
  const std::vector<int32_t> toks(used_tokens.begin(), used_tokens.end());
  std::mt19937_64 rng(seed + 2000);
  const auto& entries = params.entries();
  for (size_t t = 0; t < entries.size(); ++t) {
    const ParamInfo& p = entries[t];
    std::vector<int64_t> coords;
    int64_t best = p.offset;
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i)
      if (std::abs(res.grads[i]) > std::abs(res.grads[best])) best = i;
    coords.push_back(best);
    while (static_cast<int>(coords.size()) < per_tensor) {
      int64_t i;
      if (static_cast<int>(t) == params.embed()) {
        const int64_t H = p.shape[1];
        i = p.offset + toks[rng() % toks.size()] * H + static_cast<int64_t>(rng() % H);
      } else {
        i = p.offset + static_cast<int64_t>(rng() % p.numel);
      }
      if (std::find(coords.begin(), coords.end(), i) == coords.end()) coords.push_back(i);
    }
    TensorStats st;
    st.name = p.name;
    for (int64_t i : coords) {
      double up_loss, up_aux, dn_loss, dn_aux;
      const bool same_up = perturbed(i, kStep, up_loss, up_aux);
      if (!perturbed(i, -kStep, dn_loss, dn_aux) || !same_up) {
        ++res.skipped;  // the step flips an expert choice: no derivative there
        continue;
      }
      ++st.checked;
      const double fd = (up_loss - dn_loss) / (2 * kStep);
      const double g = res.grads[i];
      st.max_fd = std::max(st.max_fd, std::abs(fd));
      st.max_g = std::max(st.max_g, std::abs(g));
      st.max_err = std::max(st.max_err, std::abs(fd - g));
      if (aux_coef != 0.0) {
        const double fd_aux = (up_aux - dn_aux) / (2 * kStep);
        const double g_aux = static_cast<double>(res.grads[i]) - res.grads_no_aux[i];
        st.max_aux_fd = std::max(st.max_aux_fd, std::abs(fd_aux));
        st.max_aux_err = std::max(st.max_aux_err, std::abs(fd_aux - g_aux));
      }
    }
    res.checked += st.checked;
    const double ratio = st.max_err / tolerance(st.max_fd);
    if (ratio >= res.worst_ratio) res.worst_ratio = ratio, res.worst_tensor = p.name;
    res.tensors.push_back(st);
  }

  std::printf(
      "[%s] %zu micro-batch(es): loss %.9f (reference %.9f, rel %.2e), aux %.6e (reference %.6e), "
      "routing margin %.3e, %d coordinates checked, %d skipped\n",
      label, mbs.size(), res.loss, base.ce, std::abs(res.loss - base.ce) / base.ce, res.aux, base.aux, base.min_margin,
      res.checked, res.skipped);
  std::vector<const TensorStats*> order;
  for (const TensorStats& st : res.tensors) order.push_back(&st);
  std::sort(order.begin(), order.end(), [](const TensorStats* a, const TensorStats* b) {
    return a->max_err / tolerance(a->max_fd) > b->max_err / tolerance(b->max_fd);
  });
  for (size_t i = 0; i < order.size() && i < 5; ++i)
    std::printf("[%s]   worst #%zu %-48s n %2d  max|fd| %.3e  max|fd-g| %.3e  (rel %.2e)\n", label, i + 1,
                order[i]->name.c_str(), order[i]->checked, order[i]->max_fd, order[i]->max_err,
                order[i]->max_err / std::max(order[i]->max_fd, 1e-300));
  ::testing::Test::RecordProperty(std::string(label) + "_worst_tensor", res.worst_tensor);
  ::testing::Test::RecordProperty(std::string(label) + "_worst_err_over_tol", std::to_string(res.worst_ratio));

  for (const TensorStats& st : res.tensors) {
    EXPECT_GE(st.checked, 3) << label << ": " << st.name;
    EXPECT_LE(st.max_err, tolerance(st.max_fd)) << label << ": " << st.name << " max|fd - g| " << st.max_err
                                                << " with max|fd| " << st.max_fd << ", max|g| " << st.max_g;
  }
  EXPECT_LE(res.skipped, res.checked / 50) << label << ": too many routing flips";
  return res;
}

// Every tensor has a gradient of substance somewhere in the sample (the check
// would pass vacuously on zeros).
void expect_nonzero(const char* label, const CheckResult& r) {
  for (const TensorStats& st : r.tensors) EXPECT_GT(st.max_fd, 1e-5) << label << ": " << st.name;
}

TEST(LearnerGradcheck, DenseTied) {
  const ModelConfig c = small_test_config(false);  // 2 layers, tied embeddings
  const CheckResult r = run_check("dense", c, 11, 0.2f, 0.0, 12, {7, 11, 5});
  expect_nonzero("dense", r);
}

TEST(LearnerGradcheck, MoE) {
  const ModelConfig c = small_test_config(true);  // 3 layers, layer 1 dense, untied
  const CheckResult r = run_check("moe", c, 21, 0.2f, 0.0, 6, {7, 11, 5});
  expect_nonzero("moe", r);
}

// Checks the aux loss's own gradient (learner with aux minus learner without,
// against the finite differences of the reference aux term alone).
void check_aux(const char* label, const ModelConfig& c, const CheckResult& r) {
  const ParamTable layout(c, /*allocate=*/false);
  double router_diff = 0, router_g = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int ri = layout.layer(l).router;
    if (ri < 0) continue;
    const ParamInfo& p = layout.entries()[ri];
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
      router_diff = std::max(router_diff, std::abs(static_cast<double>(r.grads[i]) - r.grads_no_aux[i]));
      router_g = std::max(router_g, std::abs(static_cast<double>(r.grads_no_aux[i])));
    }
  }
  std::printf("[%s] router gradient: max|g| %.3e without aux, max|g_aux - g| %.3e\n", label, router_g, router_diff);
  EXPECT_GT(router_diff, 1e-3 * router_g) << label << ": the aux loss does not change the router gradient";
  double worst = 0, worst_err = 0, worst_fd = 0;
  std::string worst_name;
  for (const TensorStats& st : r.tensors) {
    // FP32 cancellation in g_aux - g: allow for the size of g itself.
    const double tol = 2e-3 * st.max_aux_fd + 1e-6 * st.max_g + 1e-8;
    if (st.max_aux_err / tol > worst)
      worst = st.max_aux_err / tol, worst_name = st.name, worst_err = st.max_aux_err, worst_fd = st.max_aux_fd;
    EXPECT_LE(st.max_aux_err, tol) << label << ": aux gradient of " << st.name << " off by " << st.max_aux_err
                                   << " with max|fd_aux| " << st.max_aux_fd;
  }
  std::printf("[%s] aux-only gradient: worst %s: max|fd_aux - g_aux| %.3e, max|fd_aux| %.3e (%.2f of tolerance)\n",
              label, worst_name.c_str(), worst_err, worst_fd, worst);
}

TEST(LearnerGradcheck, MoEWithAuxLoss) {
  const ModelConfig c = small_test_config(true);
  const CheckResult r = run_check("moe+aux", c, 21, 0.2f, 0.01, 6, {7, 11, 5});
  expect_nonzero("moe+aux", r);
  EXPECT_GT(r.ref_aux, 0.0);
  check_aux("moe+aux", c, r);
}

// Three micro-batches (budget 11 tokens: [7], [11], [5]): gradients
// accumulate over them and the aux loss is weighted by their token counts.
TEST(LearnerGradcheck, MoEMicroBatchesWithAuxLoss) {
  const ModelConfig c = small_test_config(true);
  const CheckResult r = run_check("moe+aux/3mb", c, 21, 0.2f, 0.05, 4, {7, 11, 5}, 11);
  expect_nonzero("moe+aux/3mb", r);
  check_aux("moe+aux/3mb", c, r);
}

// Unnormalized top-k weights, tied embeddings, MoE every other layer.
TEST(LearnerGradcheck, MoEUnnormalizedTiedWithAuxLoss) {
  ModelConfig c = small_test_config(true);
  c.norm_topk_prob = false;
  c.tie_word_embeddings = true;
  c.mlp_only_layers.clear();
  c.decoder_sparse_step = 2;  // layer 1 MoE, layers 0 and 2 dense
  c.validate("test");
  const CheckResult r = run_check("moe-unnorm", c, 31, 0.2f, 0.05, 8, {9, 6, 12});
  expect_nonzero("moe-unnorm", r);
  check_aux("moe-unnorm", c, r);
}

}  // namespace
}  // namespace mxrl
