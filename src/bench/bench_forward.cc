// mxrl bench forward: forward-pass (prefill) tokens/s of a preset model under
// several plans, on identical random tokens, in one run (fp32 is the baseline).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <random>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "model/init.h"
#include "model/score.h"
#include "tokenizer/tokenizer.h"
#include "util/clock.h"
#include "util/thread_pool.h"

namespace mxrl {

void bench_forward(const BenchForwardOptions& a) {
  const nlohmann::json provenance = bench_provenance(PairKernel::Auto);
  ThreadPool pool(a.threads);
  const int64_t vocab = builtin_char_tokenizer().vocab_size();
  ParamTable params(preset_config(a.preset, vocab));
  init_params(params, 0, 0.02f);
  std::mt19937 rng(1);
  std::vector<ScoreRequest> reqs(a.batch);
  for (auto& r : reqs) {
    for (int64_t t = 0; t < a.seq_len; ++t) r.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    r.prompt_len = 1;
  }
  nlohmann::json j = {{"bench", "forward"},
                      {"preset", a.preset},
                      {"batch", a.batch},
                      {"seq_len", a.seq_len},
                      {"threads", pool.size()},
                      {"params", params.numel()},
                      {"provenance", provenance},
                      {"results", nlohmann::json::array()}};
  if (!a.json)
    fmt::print(
        "bench forward: {} ({:.2f} M params), {} x {} tokens, {} thread(s), median of 3\n{}{:<14} {:>10} {:>10} "
        "{:>12}\n",
        a.preset, params.numel() / 1e6, a.batch, a.seq_len, pool.size(), bench_provenance_text(provenance), "plan",
        "tokens/s", "x first", "prepare ms");
  double base = 0;
  for (const std::string& name : a.plans) {
    const auto t0 = std::chrono::steady_clock::now();
    const Model model(params, PrecisionPlan::resolve(name), {&pool});
    const double prep = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> t;
    for (int rep = 0; rep < 3; ++rep) {
      const auto s0 = std::chrono::steady_clock::now();
      score_sequences(model, reqs, {a.batch * a.seq_len, 0}, {&pool});
      t.push_back(seconds_since(s0));
    }
    std::sort(t.begin(), t.end());
    const double tps = a.batch * a.seq_len / t[1];
    if (base == 0) base = tps;
    j["results"].push_back(
        {{"plan", name}, {"tokens_per_s", tps}, {"ratio_to_first", tps / base}, {"prepare_ms", prep}});
    if (!a.json) fmt::print("{:<14} {:>10.0f} {:>10.2f} {:>12.1f}\n", name, tps, tps / base, prep);
  }
  if (a.json) fmt::print("{}\n", j.dump());
}

}  // namespace mxrl
