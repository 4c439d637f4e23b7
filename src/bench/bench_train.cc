// mxrl bench train: training tokens/s of a preset model under the bf16 and
// mxfp8 recipes, on identical data, with the time split into weight
// quantization, activation quantization, GEMMs, attention, AdamW and the
// rest; --sweep fits the per-micro-batch and per-token costs
// (experiments/train_sweep.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "bench/bench_util.h"
#include "experiments/train_sweep.h"
#include "kernels/gemm/gemm.h"
#include "model/init.h"
#include "util/thread_pool.h"

namespace mxrl {

void bench_train(BenchTrainOptions a) {
  const nlohmann::json provenance = bench_provenance(a.pair_kernel);
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, a.pair_kernel};
  a.cfg.budgets = a.sweep ? a.budgets : std::vector<int64_t>{a.micro_batch_tokens};
  const TrainBenchConfig& c = a.cfg;
  if (!a.json)
    fmt::print(
        "bench train: {}, {} tokens per step ({} x {}), {} thread(s), median of {}, weight quantizations made "
        "once per {}\n{}"
        "{:<8} {:>7} {:>4} {:>9} {:>8} | {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} | {:>8} {:>8}\n",
        c.preset, c.tokens, c.tokens / c.seq_len, c.seq_len, pool.size(), c.reps,
        c.requant_every_microbatch ? "micro-batch" : "step", bench_provenance_text(provenance),
        "recipe", "budget", "mbs", "tokens/s", "x " + c.recipes[0], "w-quant", "a-quant", "gemm", "attn", "adamw",
        "rest", "mb ms", "us/token");
  auto row = [&](const nlohmann::json& r) {
    if (a.json) return;
    auto d = [&](const char* k) { return r[k].get<double>(); };
    fmt::print(
        "{:<8} {:>7} {:>4} {:>9.0f} {:>8.2f} | {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} {:>7.3f} | {:>8.1f} "
        "{:>8.1f}\n",
        r["recipe"].get<std::string>(), r["budget"].get<int64_t>(), r["micro_batches"].get<int64_t>(),
        d("tokens_per_s"), d("ratio_to_first"), d("weight_quant_s"), d("act_quant_s"), d("gemm_s"), d("attention_s"),
        d("optimizer_s"), d("rest_s"), d("microbatch_s") * 1e3, d("microbatch_s") / d("microbatch_tokens") * 1e6);
  };
  nlohmann::json j = bench_train(c, row, exec);
  if (a.json) {
    j["provenance"] = provenance;
    fmt::print("{}\n", j.dump());
    return;
  }
  if (!j.contains("fits")) return;
  fmt::print("\nfit: a micro-batch of B tokens costs fixed + B * per_token ({})\n",
             c.requant_every_microbatch ? "weight quantization included, AdamW excluded"
                                        : "weight quantization and AdamW once per step, excluded");
  for (const auto& [recipe, f] : j["fits"].items()) {
    const double fixed = f["fixed_per_microbatch_s"].get<double>();
    fmt::print("  {:<8} fixed {:8.2f} ms   per token {:7.2f} us   (R^2 {:.3f}){}\n", recipe, fixed * 1e3,
               f["per_token_s"].get<double>() * 1e6, f["r2"].get<double>(),
               fixed < 0 ? "  no fixed cost resolved: per-token cost grows with B" : "");
  }
  if (j.contains("crossover"))
    for (const auto& [recipe, x] : j["crossover"].items())
      fmt::print("  {}; measured: {}\n", x["verdict"].get<std::string>(), x["measured"].get<std::string>());
}

}  // namespace mxrl
