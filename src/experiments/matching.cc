#include "experiments/matching.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "learner/learner.h"
#include "model/checkpoint.h"
#include "model/score.h"
#include "sampler/engine.h"
#include "sampler/sampling.h"
#include "sync/bundle.h"
#include "sync/mismatch.h"
#include "tasks/tasks.h"
#include "train/sft.h"
#include "util/clock.h"
#include "util/error.h"

namespace mxrl {

std::vector<MatchSetup> default_match_setups() {
  std::vector<MatchSetup> out;
  const std::vector<std::pair<std::string, SyncMode>> mx = {{"bf16", SyncMode::Ship},
                                                            {"mxfp8-half", SyncMode::Ship},
                                                            {"mxfp8", SyncMode::Ship},
                                                            {"mxfp8-floor", SyncMode::Requantize},
                                                            {"fp8-block128", SyncMode::Requantize}};
  for (const char* kv : {"", "+fp8kv"})
    for (const auto& [plan, mode] : mx)
      out.push_back({plan + kv + (mode == SyncMode::Requantize ? " (requantize)" : ""), "mxfp8", plan + kv, mode});
  out.push_back({"bf16 end to end", "bf16", "bf16", SyncMode::Ship});
  out.push_back({"bf16 end to end+fp8kv", "bf16", "bf16+fp8kv", SyncMode::Ship});
  return out;
}

std::vector<PromptSums> measure_matching(const std::string& model_dir, const MatchSetup& s, const MatchingConfig& cfg,
                                         int split_k, const Exec& exec) {
  Checkpoint ck = load_checkpoint(model_dir);
  const auto task = make_task(cfg.task);
  const TaskSetup setup =
      make_task_setup(*task, ck.config, ck.tokenizer_json, ck.tokenizer_config_json, cfg.seed, cfg.max_new_tokens, 200);
  LearnerConfig lc;
  lc.recipe.plan = s.learner;
  Learner learner(std::move(ck.params), lc, exec);
  const PrecisionPlan plan = PrecisionPlan::resolve(s.sampler);
  if (s.sync == SyncMode::Ship) check_ship_compatible(learner.plan(), plan, learner.params().config());
  EngineOptions opt;
  opt.record_logits = true;
  if (split_k > 1) opt.forward.gemm_split_k = split_k;
  Engine engine(std::make_shared<const Model>(learner.params(), plan, exec), std::numeric_limits<uint64_t>::max(), opt,
                exec);
  SyncSettings ss;
  ss.mode = s.sync;
  ss.checks = CheckMode::Off;
  ss.sampler_plan = plan;
  const SyncReport rep = sync_weights(learner.model(), learner.params(), engine, 0, ss, {}, {}, 0, {}, exec);
  if (!rep.applied) fail("matching {}: the sampler refused the weights: {}", s.label, rep.error);

  // The probe: held-out prompts of the seed, G samples each.
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < cfg.probe_prompts; ++i) {
    GenerationRequest r;
    r.id = i;
    r.prompt = setup.tk->encode(task->generate(Split::Eval, cfg.seed, static_cast<uint64_t>(i)).prompt);
    r.n = cfg.samples_per_prompt;
    r.max_new_tokens = setup.max_new;
    r.sampling.temperature = cfg.temperature;
    r.stop_tokens = {setup.eos};
    r.seed = cfg.seed;
    prompts.push_back(r.prompt);
    engine.submit(r);
  }
  const std::vector<GeneratedSample> samples = engine.run();
  const Model& ref = learner.model();
  const int64_t V = ref.config().vocab_size;
  std::vector<PromptSums> out(static_cast<size_t>(cfg.probe_prompts));
  std::vector<float> scratch;
  for (const GeneratedSample& g : samples) {
    std::vector<int32_t> seq = prompts.at(static_cast<size_t>(g.request));
    const size_t P = seq.size();
    seq.insert(seq.end(), g.tokens.begin(), g.tokens.end());
    const std::vector<float> rows = sequence_logits(ref, seq, exec);
    add_sample(out[static_cast<size_t>(g.request)], g.logits.data(), &rows[(P - 1) * V], g.tokens.data(),
               static_cast<int64_t>(g.tokens.size()), V, cfg.temperature, scratch);
  }
  return out;
}

void add_sample(PromptSums& p, const float* sampler_rows, const float* learner_rows, const int32_t* tokens, int64_t T,
                int64_t V, float temperature, std::vector<float>& scratch) {
  for (int64_t t = 0; t < T; ++t) {
    const float* rl = &learner_rows[t * V];
    const float* rs = &sampler_rows[t * V];
    const double lp_l = token_logprob(rl, V, temperature, tokens[t], scratch);
    const double lp_s = token_logprob(rs, V, temperature, tokens[t], scratch);
    const double d = lp_l - lp_s;
    ++p.tokens;
    p.kl += exact_kl(rs, rl, V, temperature);
    p.k3 += std::exp(d) - 1 - d;
    p.abs_dlogp += std::abs(d);
    p.abs_dlogp_max = std::max(p.abs_dlogp_max, std::abs(d));
    p.unequal += d != 0;
  }
}

namespace {
double ratio_of(const std::vector<PromptSums>& p, double PromptSums::*f, const std::vector<size_t>& idx) {
  double num = 0, den = 0;
  for (size_t i : idx) num += p[i].*f, den += static_cast<double>(p[i].tokens);
  return den > 0 ? num / den : std::numeric_limits<double>::quiet_NaN();
}

std::vector<size_t> identity(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

Interval percentiles(double mean, std::vector<double> reps) {
  reps.erase(std::remove_if(reps.begin(), reps.end(), [](double x) { return !std::isfinite(x); }), reps.end());
  if (reps.empty()) return {mean, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  std::sort(reps.begin(), reps.end());
  auto at = [&](double q) { return reps[static_cast<size_t>(std::floor(q * static_cast<double>(reps.size() - 1)))]; };
  return {mean, at(0.025), at(0.975)};
}

template <class Stat>
Interval bootstrap(size_t n, int64_t reps, uint64_t seed, Stat stat) {
  const double mean = stat(identity(n));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, n - 1);
  std::vector<double> r;
  std::vector<size_t> idx(n);
  for (int64_t k = 0; k < reps && n > 0; ++k) {
    for (size_t& i : idx) i = pick(rng);
    r.push_back(stat(idx));
  }
  return percentiles(mean, std::move(r));
}
}  // namespace

Interval bootstrap_mean(const std::vector<PromptSums>& p, double PromptSums::*field, int64_t reps, uint64_t seed) {
  return bootstrap(p.size(), reps, seed, [&](const std::vector<size_t>& idx) { return ratio_of(p, field, idx); });
}

Interval bootstrap_ratio(const std::vector<PromptSums>& a, const std::vector<PromptSums>& b, int64_t reps,
                         uint64_t seed) {
  if (a.size() != b.size()) fail("bootstrap_ratio: {} and {} prompts", a.size(), b.size());
  return bootstrap(a.size(), reps, seed, [&](const std::vector<size_t>& idx) {
    const double den = ratio_of(b, &PromptSums::kl, idx);
    return den > 0 ? ratio_of(a, &PromptSums::kl, idx) / den : std::numeric_limits<double>::quiet_NaN();
  });
}

namespace {
nlohmann::json num(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }
nlohmann::json ci(const Interval& i) { return nlohmann::json::array({num(i.lo), num(i.hi)}); }

struct Claim {
  const char* claim;
  const char* paper;
  const char* preset;  // "" both
  const char* numerator;
  const char* denominator;
};
// The paper's three figures (docs/reference.md §1), as ratios of mean exact KL.
const std::vector<Claim>& claims() {
  static const std::vector<Claim> c = {
      {"half the linears on grid vs a BF16 sampler", "-11% KL (0.89x)", "", "mxfp8-half", "bf16"},
      {"all linears on grid vs a BF16 sampler", "-16% KL (0.84x)", "", "mxfp8", "bf16"},
      {"MoE: another grid vs the shared grid", "2x KL", "moe", "mxfp8-floor (requantize)", "mxfp8"},
      {"MoE: another grid vs the shared grid", "2x KL", "moe", "fp8-block128 (requantize)", "mxfp8"},
      {"MXFP8 end to end vs BF16 end to end (no quantized KV)", "2.5-10x KL", "", "mxfp8", "bf16 end to end"},
      {"MXFP8 end to end (FP8 KV) vs BF16 end to end (no quantized KV)", "2.5-10x KL", "", "mxfp8+fp8kv",
       "bf16 end to end"},
  };
  return c;
}
}  // namespace

nlohmann::json run_matching(const MatchingConfig& cfg, const std::function<void(const std::string&)>& progress,
                            const Exec& exec) {
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json j;
  j["config"] = {{"task", cfg.task},
                 {"probe_prompts", cfg.probe_prompts},
                 {"samples_per_prompt", cfg.samples_per_prompt},
                 {"temperature", cfg.temperature},
                 {"bootstrap", cfg.bootstrap},
                 {"seed", cfg.seed},
                 {"foreign_split_k", cfg.foreign_split_k}};
  j["rows"] = nlohmann::json::array();
  j["paper"] = nlohmann::json::array();
  // (preset, kernels, label) -> per-prompt sums
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<PromptSums>> all;
  const std::vector<std::pair<std::string, std::string>> models = {{"dense", cfg.dense_model}, {"moe", cfg.moe_model}};
  for (const auto& [preset, dir] : models) {
    if (dir.empty()) continue;
    for (const char* kernels : {"shared", "foreign"})
      for (const MatchSetup& s : cfg.setups) {
        const int split = std::string(kernels) == "foreign" ? cfg.foreign_split_k : 0;
        const auto t = std::chrono::steady_clock::now();
        std::vector<PromptSums> p = measure_matching(dir, s, cfg, split, exec);
        const uint64_t bseed = cfg.seed * 1000003 + all.size();
        const Interval kl = bootstrap_mean(p, &PromptSums::kl, cfg.bootstrap, bseed);
        const Interval k3 = bootstrap_mean(p, &PromptSums::k3, cfg.bootstrap, bseed);
        const Interval ad = bootstrap_mean(p, &PromptSums::abs_dlogp, cfg.bootstrap, bseed);
        int64_t tokens = 0, unequal = 0;
        double dmax = 0;
        for (const PromptSums& q : p) tokens += q.tokens, unequal += q.unequal, dmax = std::max(dmax, q.abs_dlogp_max);
        j["rows"].push_back({{"preset", preset},
                             {"learner", s.learner},
                             {"sampler", s.sampler},
                             {"sync", sync_mode_name(s.sync)},
                             {"fp8kv", s.sampler.find("fp8kv") != std::string::npos},
                             {"kernels", kernels},
                             {"label", s.label},
                             {"tokens", tokens},
                             {"sequences", cfg.probe_prompts * cfg.samples_per_prompt},
                             {"kl_mean", num(kl.mean)},
                             {"kl_ci", ci(kl)},
                             {"k3", num(k3.mean)},
                             {"k3_ci", ci(k3)},
                             {"abs_dlogp_mean", num(ad.mean)},
                             {"abs_dlogp_mean_ci", ci(ad)},
                             {"abs_dlogp_max", dmax},
                             {"bitwise_equal", tokens > 0 && unequal == 0}});
        if (progress)
          progress(fmt::format("{} {} kernels, {}: KL {:.3g} [{:.3g}, {:.3g}], max |dlogp| {:.3g} ({:.1f} s)", preset,
                               kernels, s.label, kl.mean, kl.lo, kl.hi, dmax, seconds_since(t)));
        all[{preset, kernels, s.label}] = std::move(p);
      }
  }
  for (const Claim& c : claims())
    for (const auto& [preset, dir] : models) {
      if (dir.empty() || (*c.preset && preset != c.preset)) continue;
      for (const char* kernels : {"foreign", "shared"}) {
        const auto a = all.find({preset, kernels, c.numerator}), b = all.find({preset, kernels, c.denominator});
        if (a == all.end() || b == all.end()) continue;
        const Interval r = bootstrap_ratio(a->second, b->second, cfg.bootstrap, cfg.seed * 7919 + j["paper"].size());
        j["paper"].push_back({{"claim", c.claim},
                              {"paper", c.paper},
                              {"preset", preset},
                              {"kernels", kernels},
                              {"numerator", c.numerator},
                              {"denominator", c.denominator},
                              {"ratio", num(r.mean)},
                              {"ratio_ci", ci(r)},
                              {"change_pct", std::isfinite(r.mean) ? num((r.mean - 1) * 100) : nullptr}});
      }
    }
  j["config"]["seconds"] = seconds_since(t0);
  return j;
}

}  // namespace mxrl
