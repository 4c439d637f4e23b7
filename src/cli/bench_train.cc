// mxrl bench train: training tokens/s of a preset model under the bf16 and
// mxfp8 recipes, on identical data, with the time split into weight
// quantization, activation quantization, GEMMs, AdamW and the rest.
//
// Sweep mode: for each micro-batch token budget B, one optimizer step over
// the same T tokens cut into k = ceil(T / B) micro-batches. The time of one
// micro-batch is
//     c(B) = (step - adamw - weight quantization made once per step) / k
// (with --requant-every-microbatch the weight quantizations are made per
// micro-batch and stay in c), and per recipe c(B) = fixed + B * per_token is
// fitted by least squares over the sweep. MXFP8 is the cheaper recipe from
// B* = (fixed_mx - fixed_bf) / (per_token_bf - per_token_mx) on, when that is
// positive (and never, or always, otherwise). A fitted fixed cost below zero
// means none is resolved: the per-token cost itself grows with B (caches).
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
  bool sweep = false, json = false, requant_every_microbatch = false;
  int threads = 0;
};

struct Timing {
  double step = 0, weight_quant = 0, act_quant = 0, gemm = 0, optimizer = 0;
  int64_t micro_batches = 0;
  double rest() const { return step - weight_quant - act_quant - gemm - optimizer; }
};

// The median (by step time) of `reps` steps after one warm-up step.
Timing time_steps(const ParamTable& init, const std::string& recipe, int64_t budget, bool requant,
                  const std::vector<Sequence>& batch, int64_t reps, ThreadPool& pool) {
  LearnerConfig cfg;
  cfg.recipe.plan = recipe;
  cfg.recipe.requant_every_microbatch = requant;
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

// Least squares y = a + b x, and its coefficient of determination.
struct Line { double a = 0, b = 0, r2 = 0; };
Line fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
  Line l;
  const double den = n * sxx - sx * sx;
  l.b = den != 0 ? (n * sxy - sx * sy) / den : 0;
  l.a = (sy - l.b * sx) / n;
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ss_res += (y[i] - l.a - l.b * x[i]) * (y[i] - l.a - l.b * x[i]);
    ss_tot += (y[i] - sy / n) * (y[i] - sy / n);
  }
  l.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
  return l;
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
                      {"threads", pool.size()}, {"params", params.numel()},
                      {"requant_every_microbatch", a.requant_every_microbatch}, {"results", nlohmann::json::array()}};
  const std::vector<int64_t> budgets = a.sweep ? a.budgets : std::vector<int64_t>{a.micro_batch_tokens};
  for (int64_t b : budgets)
    if (b < a.seq_len) fail("micro-batch budget {} is below the sequence length {}", b, a.seq_len);
  if (!a.json)
    fmt::print("bench train: {} ({:.2f} M params), {} tokens per step ({} x {}), {} thread(s), median of {}, weight "
               "quantizations made once per {}\n"
               "{:<8} {:>7} {:>4} {:>9} {:>8} | {:>7} {:>7} {:>7} {:>7} {:>7} | {:>8} {:>8}\n",
               a.preset, params.numel() / 1e6, a.tokens, batch.size(), a.seq_len, pool.size(), a.reps,
               a.requant_every_microbatch ? "micro-batch" : "step", "recipe", "budget", "mbs", "tokens/s",
               "x " + a.recipes[0], "w-quant", "a-quant", "gemm", "adamw", "rest", "mb ms", "us/token");
  std::map<int64_t, double> base;  // budget -> tokens/s of the first recipe
  std::map<std::string, Line> fits;  // recipe -> fixed (a) + per-token (b) cost of a micro-batch
  std::string fits_text;
  // Budgets outer, recipes inner: each ratio compares runs made minutes, not a
  // whole sweep, apart (this machine's speed drifts by +-20% over a sweep).
  std::map<std::string, std::vector<double>> bs, cs;  // recipe -> micro-batch tokens, seconds
  for (int64_t b : budgets)
    for (const std::string& recipe : a.recipes) {
      const Timing t = time_steps(params, recipe, b, a.requant_every_microbatch, batch, a.reps, pool);
      const double tps = a.tokens / t.step;
      if (!base.count(b)) base[b] = tps;
      // One micro-batch: everything but AdamW and a once-per-step weight quantization.
      const double per_mb = (t.step - t.optimizer - (a.requant_every_microbatch ? 0.0 : t.weight_quant)) /
                            static_cast<double>(t.micro_batches);
      const double mb_tokens = static_cast<double>(a.tokens) / static_cast<double>(t.micro_batches);
      nlohmann::json r = timing_json(t, a.tokens);
      r["recipe"] = recipe, r["budget"] = b, r["ratio_to_first"] = tps / base[b];
      r["microbatch_s"] = per_mb, r["microbatch_tokens"] = mb_tokens;
      j["results"].push_back(r);
      if (!a.json)
        fmt::print("{:<8} {:>7} {:>4} {:>9.0f} {:>8.2f} | {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} | {:>8.1f} {:>8.1f}\n",
                   recipe, b, t.micro_batches, tps, tps / base[b], t.weight_quant, t.act_quant, t.gemm, t.optimizer,
                   t.rest(), per_mb * 1e3, per_mb / mb_tokens * 1e6);
      bs[recipe].push_back(mb_tokens);
      cs[recipe].push_back(per_mb);
    }
  if (a.sweep)
    for (const std::string& recipe : a.recipes) {
      if (fits.count(recipe)) continue;  // named twice
      const Line l = fits[recipe] = fit_line(bs[recipe], cs[recipe]);
      j["fits"][recipe] = {{"fixed_per_microbatch_s", l.a}, {"per_token_s", l.b}, {"r2", l.r2}};
      if (!a.json)
        fits_text += fmt::format("  {:<8} fixed {:8.2f} ms   per token {:7.2f} us   (R^2 {:.3f}){}\n", recipe, l.a * 1e3,
                                 l.b * 1e6, l.r2, l.a < 0 ? "  no fixed cost resolved: per-token cost grows with B" : "");
    }
  if (a.sweep && fits.size() >= 2) {
    const std::string& first = a.recipes[0];  // the baseline
    const Line& bf = fits.at(first);
    if (!a.json)
      fmt::print("\nfit: a micro-batch of B tokens costs fixed + B * per_token ({})\n{}",
                 a.requant_every_microbatch ? "weight quantization included, AdamW excluded"
                                            : "weight quantization and AdamW once per step, excluded",
                 fits_text);
    const double lo = static_cast<double>(*std::min_element(budgets.begin(), budgets.end()));
    const double hi = static_cast<double>(*std::max_element(budgets.begin(), budgets.end()));
    for (const std::string& name : a.recipes) {
      if (name == first || !fits.count(name)) continue;
      const Line& f = fits.at(name);
      const double dfix = f.a - bf.a, dtok = bf.b - f.b;  // extra fixed cost, per-token saving
      std::string verdict;
      double cross = -1;
      if (dtok > 0 && dfix > 0) cross = dfix / dtok, verdict = fmt::format("{} is cheaper than {} from B = {:.0f} tokens per micro-batch", name, first, cross);
      else if (dtok > 0) verdict = fmt::format("{} is cheaper than {} at every budget", name, first);
      else if (dfix < 0 && dtok < 0) cross = dfix / dtok, verdict = fmt::format("{} is cheaper than {} only below B = {:.0f}", name, first, cross);
      else verdict = fmt::format("{} is never cheaper than {} here (its per-token cost is not lower)", name, first);
      if (cross >= 0 && (cross < lo || cross > hi))
        verdict += fmt::format(" (outside the swept {:.0f}..{:.0f}: extrapolated)", lo, hi);
      const std::string measured = [&] {  // what the sweep itself shows, fit aside
        int64_t cheaper = 0;
        for (const auto& r : j["results"])
          if (r["recipe"] == name && r["ratio_to_first"].get<double>() > 1) ++cheaper;
        return fmt::format("faster than {} at {} of {} swept budgets", first, cheaper, budgets.size());
      }();
      j["crossover"][name] = {{"vs", first}, {"tokens", cross}, {"verdict", verdict}, {"measured", measured}};
      if (!a.json) fmt::print("  {}; measured: {}\n", verdict, measured);
    }
  }
  if (a.json) fmt::print("{}\n", j.dump());
}
}  // namespace

void add_bench_train(CLI::App* bench) {
  auto a = std::make_shared<TrainBenchArgs>();
  auto* c = bench->add_subcommand("train", "Training tokens/s per recipe, split by phase; --sweep fits the per-micro-batch and per-token costs");
  c->add_option("--preset", a->preset, "Preset model")->check(CLI::IsMember(preset_names()))->capture_default_str();
  c->add_option("--recipe", a->recipes, "Recipes to compare (the first is the baseline)")->capture_default_str();
  c->add_option("--tokens", a->tokens, "Tokens per optimizer step")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--micro-batch-tokens", a->micro_batch_tokens, "Micro-batch budget (without --sweep)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seq-len", a->seq_len, "Tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--budgets", a->budgets, "Sweep budgets")->capture_default_str();
  c->add_option("--reps", a->reps, "Timed steps per point (median)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_flag("--requant-every-microbatch", a->requant_every_microbatch,
              "Remake the weight quantizations every micro-batch (counted in the micro-batch's fixed cost)");
  c->add_flag("--sweep", a->sweep, "Sweep the micro-batch budget and fit fixed and per-token costs");
  c->add_flag("--json", a->json, "One JSON object on stdout");
  add_threads_option(c, &a->threads);
  c->callback([a] { bench_train(*a); });
}

}  // namespace mxrl::cli
