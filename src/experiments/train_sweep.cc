#include "experiments/train_sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>

#include "learner/learner.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct Timing {
  double step = 0, weight_quant = 0, act_quant = 0, gemm = 0, attention = 0, optimizer = 0;
  int64_t micro_batches = 0;
  double rest() const { return step - weight_quant - act_quant - gemm - attention - optimizer; }
};

// The median (by step time) of `reps` steps after one warm-up step.
Timing time_steps(const ParamTable& init, const std::string& recipe, int64_t budget, bool requant,
                  const std::vector<Sequence>& batch, int64_t reps, const Exec& exec) {
  LearnerConfig cfg;
  cfg.recipe.plan = recipe;
  cfg.recipe.requant_every_microbatch = requant;
  cfg.micro_batch_tokens = budget;
  Learner learner(init, cfg, exec);
  learner.step(batch);
  std::vector<Timing> t;
  for (int64_t i = 0; i < reps; ++i) {
    const StepResult r = learner.step(batch);
    t.push_back({r.seconds, r.times[Phase::WeightQuant], r.times[Phase::ActQuant], r.times[Phase::Gemm],
                 r.times[Phase::Attention], r.optimizer_seconds, r.micro_batches});
  }
  std::sort(t.begin(), t.end(), [](const Timing& a, const Timing& b) { return a.step < b.step; });
  return t[t.size() / 2];
}
}  // namespace

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

namespace {
// The preset with random weights and a batch of random tokens (every token a target but the first).
std::pair<ParamTable, std::vector<Sequence>> bench_model_and_batch(const TrainBenchConfig& a) {
  const int64_t vocab = builtin_char_tokenizer().vocab_size();
  ParamTable params(preset_config(a.preset, vocab));
  init_params(params, 0, 0.02f);
  if (a.tokens % a.seq_len != 0) fail("--tokens ({}) must be a multiple of --seq-len ({})", a.tokens, a.seq_len);
  for (int64_t b : a.budgets)
    if (b < a.seq_len) fail("micro-batch budget {} is below the sequence length {}", b, a.seq_len);
  std::mt19937 rng(1);
  std::vector<Sequence> batch(a.tokens / a.seq_len);
  for (Sequence& s : batch) {
    for (int64_t t = 0; t < a.seq_len; ++t) s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    s.target.assign(a.seq_len, 1);
    s.target[0] = 0;
  }
  return {std::move(params), std::move(batch)};
}
}  // namespace

std::string trace_train_step(const TrainBenchConfig& a, const std::string& recipe, const Exec& exec) {
  auto [params, batch] = bench_model_and_batch(a);
  LearnerConfig cfg;
  cfg.recipe.plan = recipe;
  cfg.micro_batch_tokens = a.budgets.at(0);
  Learner learner(std::move(params), cfg, exec);
  learner.step(batch);  // warm-up: the first step allocates and prepares what later ones reuse
  Timeline timeline;
  learner.set_timeline(&timeline);
  learner.step(batch);
  learner.set_timeline(nullptr);
  return timeline.to_chrome_json(fmt::format("mxrl train step: {}, {}, {} tokens", a.preset, recipe, a.tokens));
}

nlohmann::json bench_train(const TrainBenchConfig& a, const std::function<void(const nlohmann::json&)>& on_result,
                           const Exec& exec) {
  if (a.recipes.empty() || a.budgets.empty()) fail("bench train: no recipe or no budget");
  const auto [params, batch] = bench_model_and_batch(a);
  nlohmann::json j = {{"bench", "train"},
                      {"preset", a.preset},
                      {"tokens", a.tokens},
                      {"seq_len", a.seq_len},
                      {"threads", exec.pool ? exec.pool->size() : 1},
                      {"params", params.numel()},
                      {"requant_every_microbatch", a.requant_every_microbatch},
                      {"results", nlohmann::json::array()}};
  std::map<int64_t, double> base;                     // budget -> tokens/s of the first recipe
  std::map<std::string, std::vector<double>> bs, cs;  // recipe -> micro-batch tokens, seconds
  for (int64_t b : a.budgets)
    for (const std::string& recipe : a.recipes) {
      const Timing t = time_steps(params, recipe, b, a.requant_every_microbatch, batch, a.reps, exec);
      const double tps = a.tokens / t.step;
      if (!base.count(b)) base[b] = tps;
      // One micro-batch: everything but AdamW and a once-per-step weight quantization.
      const double per_mb = (t.step - t.optimizer - (a.requant_every_microbatch ? 0.0 : t.weight_quant)) /
                            static_cast<double>(t.micro_batches);
      const double mb_tokens = static_cast<double>(a.tokens) / static_cast<double>(t.micro_batches);
      const nlohmann::json r = {{"recipe", recipe},
                                {"budget", b},
                                {"tokens_per_s", tps},
                                {"step_s", t.step},
                                {"weight_quant_s", t.weight_quant},
                                {"act_quant_s", t.act_quant},
                                {"gemm_s", t.gemm},
                                {"attention_s", t.attention},
                                {"optimizer_s", t.optimizer},
                                {"rest_s", t.rest()},
                                {"micro_batches", t.micro_batches},
                                {"ratio_to_first", tps / base[b]},
                                {"microbatch_s", per_mb},
                                {"microbatch_tokens", mb_tokens}};
      j["results"].push_back(r);
      if (on_result) on_result(r);
      bs[recipe].push_back(mb_tokens);
      cs[recipe].push_back(per_mb);
    }
  if (a.budgets.size() < 2) return j;
  std::map<std::string, Line> fits;
  for (const std::string& recipe : a.recipes) {
    const Line l = fits[recipe] = fit_line(bs[recipe], cs[recipe]);
    j["fits"][recipe] = {{"fixed_per_microbatch_s", l.a}, {"per_token_s", l.b}, {"r2", l.r2}};
  }
  const std::string& first = a.recipes[0];
  const Line& bf = fits.at(first);
  const double lo = static_cast<double>(*std::min_element(a.budgets.begin(), a.budgets.end()));
  const double hi = static_cast<double>(*std::max_element(a.budgets.begin(), a.budgets.end()));
  for (const auto& [name, f] : fits) {
    if (name == first) continue;
    const double dfix = f.a - bf.a, dtok = bf.b - f.b;  // extra fixed cost, per-token saving
    std::string verdict;
    double cross = -1;
    if (bf.a < 0 || f.a < 0)
      verdict = fmt::format(
          "none resolved on this backend: the fit of {} has a negative fixed cost (its per-token "
          "cost grows with B), so a crossover from the fit would be an artefact",
          bf.a < 0 ? first : name);
    else if (dtok > 0 && dfix > 0)
      cross = dfix / dtok,
      verdict = fmt::format("{} is cheaper than {} from B = {:.0f} tokens per micro-batch", name, first, cross);
    else if (dtok > 0)
      verdict = fmt::format("{} is cheaper than {} at every budget", name, first);
    else if (dfix < 0 && dtok < 0)
      cross = dfix / dtok, verdict = fmt::format("{} is cheaper than {} only below B = {:.0f}", name, first, cross);
    else
      verdict = fmt::format("{} is never cheaper than {} here (its per-token cost is not lower)", name, first);
    if (cross >= 0 && (cross < lo || cross > hi))
      verdict += fmt::format(" (outside the swept {:.0f}..{:.0f}: extrapolated)", lo, hi);
    int64_t cheaper = 0;  // what the sweep itself shows, fit aside
    for (const auto& r : j["results"])
      if (r["recipe"] == name && r["ratio_to_first"].get<double>() > 1) ++cheaper;
    j["crossover"][name] = {
        {"vs", first},
        {"tokens", cross},
        {"verdict", verdict},
        {"measured", fmt::format("faster than {} at {} of {} swept budgets", first, cheaper, a.budgets.size())}};
  }
  return j;
}

}  // namespace mxrl
