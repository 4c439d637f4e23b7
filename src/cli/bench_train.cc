// mxrl bench train: training tokens/s of a preset model under the bf16 and
// mxfp8 recipes, on identical data, with the time split into weight
// quantization, activation quantization, GEMMs and the rest.
//
// Sweep mode: for each micro-batch token budget B, one optimizer step over
// the same T tokens cut into k = ceil(T / B) micro-batches. Per recipe the
// step time is fitted as
//     step(B) = W + O + k * fixed + T * per_token
// (W weight quantization and O the optimizer update, both measured, once per
// step), which gives the fixed cost of a micro-batch and the cost of a token;
// a micro-batch of B tokens then costs fixed + B * per_token, and MXFP8 is
// the cheaper recipe from B* = (fixed_mx - fixed_bf) / (per_token_bf - per_token_mx)
// on, when that is positive (and never, or always, otherwise).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

#include "cli/commands.h"
#include "learner/learner.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
struct TrainBenchArgs {
  std::string preset = "tiny-dense";
  std::vector<std::string> recipes = {"bf16", "mxfp8"};
  int64_t tokens = 16384, micro_batch_tokens = 4096, seq_len = 128, reps = 2;
  std::vector<int64_t> budgets = {512, 1024, 2048, 4096, 8192, 16384};
  bool sweep = false, json = false;
  int threads = 0;
};

struct Timing {
  double step = 0, weight_quant = 0, act_quant = 0, gemm = 0, optimizer = 0;
  int64_t micro_batches = 0;
  double rest() const { return step - weight_quant - act_quant - gemm - optimizer; }
};

// The median (by step time) of `reps` steps after one warm-up step.
Timing time_steps(const ParamTable& init, const std::string& recipe, int64_t budget, const std::vector<Sequence>& batch,
                  int64_t reps, ThreadPool& pool) {
  LearnerConfig cfg;
  cfg.recipe.plan = recipe;
  cfg.micro_batch_tokens = budget;
  Learner learner(init, cfg, Exec{&pool});
  learner.step(batch);
  std::vector<Timing> t;
  for (int64_t i = 0; i < reps; ++i) {
    const StepResult r = learner.step(batch);
    t.push_back({r.seconds, r.times[Phase::WeightQuant], r.times[Phase::ActQuant], r.times[Phase::Gemm],
                 r.optimizer_seconds, r.micro_batches});
  }
  std::sort(t.begin(), t.end(), [](const Timing& a, const Timing& b) { return a.step < b.step; });
  return t[t.size() / 2];
}

nlohmann::json timing_json(const Timing& t, int64_t tokens) {
  return {{"tokens_per_s", tokens / t.step}, {"step_s", t.step},           {"weight_quant_s", t.weight_quant},
          {"act_quant_s", t.act_quant},      {"gemm_s", t.gemm},           {"optimizer_s", t.optimizer},
          {"rest_s", t.rest()},              {"micro_batches", t.micro_batches}};
}

// Least squares y = a + b x.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {(sy - b * sx) / n, b};
}

void bench_train(const TrainBenchArgs& a) {
  ThreadPool pool(a.threads);
  const int64_t vocab = tok::builtin_char_tokenizer().vocab_size();
  ParamTable params(preset_config(a.preset, vocab));
  init_params(params, 0, 0.02f);
  if (a.tokens % a.seq_len != 0) fail("--tokens ({}) must be a multiple of --seq-len ({})", a.tokens, a.seq_len);
  std::mt19937 rng(1);
  std::vector<Sequence> batch(a.tokens / a.seq_len);
  for (Sequence& s : batch) {
    for (int64_t t = 0; t < a.seq_len; ++t) s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    s.target.assign(a.seq_len, 1);
    s.target[0] = 0;
  }
  nlohmann::json j = {{"bench", "train"}, {"preset", a.preset}, {"tokens", a.tokens}, {"seq_len", a.seq_len},
                      {"threads", pool.size()}, {"params", params.numel()}, {"results", nlohmann::json::array()}};
  const std::vector<int64_t> budgets = a.sweep ? a.budgets : std::vector<int64_t>{a.micro_batch_tokens};
  for (int64_t b : budgets)
    if (b < a.seq_len) fail("micro-batch budget {} is below the sequence length {}", b, a.seq_len);
  if (!a.json)
    fmt::print("bench train: {} ({:.2f} M params), {} tokens per step ({} x {}), {} thread(s), median of {}\n"
               "{:<8} {:>7} {:>4} {:>9} {:>8} | {:>7} {:>7} {:>7} {:>7} {:>7}  (seconds per step)\n",
               a.preset, params.numel() / 1e6, a.tokens, batch.size(), a.seq_len, pool.size(), a.reps, "recipe",
               "budget", "mbs", "tokens/s", "x " + a.recipes[0], "w-quant", "a-quant", "gemm", "adamw", "rest");
  std::map<int64_t, double> base;  // budget -> tokens/s of the first recipe
  struct Fit { double fixed, per_token; };
  std::map<std::string, Fit> fits;
  for (const std::string& recipe : a.recipes) {
    std::vector<double> ks, ys;
    for (int64_t b : budgets) {
      const Timing t = time_steps(params, recipe, b, batch, a.reps, pool);
      const double tps = a.tokens / t.step;
      if (!base.count(b)) base[b] = tps;
      nlohmann::json r = timing_json(t, a.tokens);
      r["recipe"] = recipe, r["budget"] = b, r["ratio_to_first"] = tps / base[b];
      j["results"].push_back(r);
      if (!a.json)
        fmt::print("{:<8} {:>7} {:>4} {:>9.0f} {:>8.2f} | {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f}\n", recipe, b,
                   t.micro_batches, tps, tps / base[b], t.weight_quant, t.act_quant, t.gemm, t.optimizer, t.rest());
      ks.push_back(static_cast<double>(t.micro_batches));
      ys.push_back(t.step - t.weight_quant - t.optimizer);
    }
    if (a.sweep) {
      const auto [c, fixed] = fit_line(ks, ys);
      fits[recipe] = {fixed, c / static_cast<double>(a.tokens)};
      j["fits"][recipe] = {{"fixed_per_microbatch_s", fixed}, {"per_token_s", c / a.tokens}};
    }
  }
  if (a.sweep && fits.size() >= 2) {
    const Fit& bf = fits.begin()->second;
    const std::string first = fits.begin()->first;
    if (!a.json) fmt::print("\nfit: micro-batch of B tokens costs fixed + B * per_token (weight quantization and AdamW once per step)\n");
    for (const auto& [name, f] : fits)
      if (!a.json) fmt::print("  {:<8} fixed {:8.2f} ms   per token {:7.2f} us\n", name, f.fixed * 1e3, f.per_token * 1e6);
    for (const auto& [name, f] : fits) {
      if (name == first) continue;
      const double dfix = f.fixed - bf.fixed, dtok = bf.per_token - f.per_token;
      std::string verdict;
      double cross = -1;
      if (dtok > 0 && dfix > 0) cross = dfix / dtok, verdict = fmt::format("{} is cheaper than {} from B = {:.0f} tokens per micro-batch", name, first, cross);
      else if (dtok > 0) verdict = fmt::format("{} is cheaper than {} at every budget", name, first);
      else if (dfix < 0) verdict = fmt::format("{} is cheaper than {} only below B = {:.0f}", name, first, dfix / dtok);
      else verdict = fmt::format("{} is never cheaper than {} here (its per-token cost is higher)", name, first);
      j["crossover"][name] = {{"vs", first}, {"tokens", cross}, {"verdict", verdict}};
      if (!a.json) fmt::print("  {}\n", verdict);
    }
  }
  if (a.json) fmt::print("{}\n", j.dump());
}
}  // namespace

void add_bench_train(CLI::App* bench) {
  auto a = std::make_shared<TrainBenchArgs>();
  auto* c = bench->add_subcommand("train", "Training tokens/s per recipe, split by phase; --sweep fits the per-micro-batch and per-token costs");
  c->add_option("--preset", a->preset, "tiny-dense or tiny-moe")->check(CLI::IsMember({"tiny-dense", "tiny-moe"}))->capture_default_str();
  c->add_option("--recipe", a->recipes, "Recipes to compare (the first is the baseline)")->capture_default_str();
  c->add_option("--tokens", a->tokens, "Tokens per optimizer step")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--micro-batch-tokens", a->micro_batch_tokens, "Micro-batch budget (without --sweep)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seq-len", a->seq_len, "Tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--budgets", a->budgets, "Sweep budgets")->capture_default_str();
  c->add_option("--reps", a->reps, "Timed steps per point (median)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_flag("--sweep", a->sweep, "Sweep the micro-batch budget and fit fixed and per-token costs");
  c->add_flag("--json", a->json, "One JSON object on stdout");
  add_threads_option(c, &a->threads);
  c->callback([a] { bench_train(*a); });
}

}  // namespace mxrl::cli
