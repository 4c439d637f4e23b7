// mxrl sft: supervised fine-tuning on a built-in task or a JSONL dataset,
// with evaluation through the sampler, checkpoints and resume.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "cli/run_cli.h"
#include "cli/settings_cli.h"
#include "cli/sft_cli.h"
#include "train/run_setup.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/metrics.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace mxrl {

SftCliResult run_sft_cli(const SftCliArgs& a, SftRun& run) {
  const SftConfig& cfg = run.config();
  MetricsSink metrics(a.metrics);
  Progress progress;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = run.step();
  double ema_loss = -1;
  int64_t tokens = 0;
  auto elapsed = [&] { return seconds_since(t0); };
  SftEvents ev;
  ev.on_step = [&](int64_t step, const StepResult& r) {
    tokens += r.tokens;
    ema_loss = ema_loss < 0 ? r.loss : 0.9 * ema_loss + 0.1 * r.loss;
    const double tps = r.tokens / r.seconds;
    metrics.write(nlohmann::json{{"step", step},
                                 {"loss", r.loss},
                                 {"tokens_per_s", tps},
                                 {"lr", r.optim.lr},
                                 {"grad_norm", r.optim.grad_norm},
                                 {"tokens", r.tokens},
                                 {"targets", r.targets},
                                 {"micro_batches", r.micro_batches},
                                 {"seconds", r.seconds},
                                 {"weight_quant_s", r.times[Phase::WeightQuant]},
                                 {"act_quant_s", r.times[Phase::ActQuant]},
                                 {"gemm_s", r.times[Phase::Gemm]},
                                 {"aux_loss", r.aux_loss}});
    const double done = static_cast<double>(step - first) / static_cast<double>(cfg.steps - first);
    const double eta = done > 0 ? elapsed() * (1 - done) / done : 0;
    const std::string line =
        fmt::format("{} step {}/{} loss {:.4f} (avg {:.4f}) {:.0f} tok/s lr {:.2e} eta {}", Progress::bar(done, 1, 24),
                    step, cfg.steps, r.loss, ema_loss, tokens / elapsed(), r.optim.lr, format_duration(eta));
    if (progress.on())
      progress.show(line);
    else if (step % a.log_every == 0 || step == cfg.steps)
      fmt::print(stderr, "{}\n", line);
  };
  ev.on_eval = [&](const EvalResult& e) {
    metrics.write(e.to_json());
    progress.clear();
    fmt::print(stderr, "eval at step {}: accuracy {:.3f} ({}/{} held-out problems, greedy, {:.1f} s)\n", e.step,
               e.accuracy, e.correct, e.total, e.seconds);
  };
  ev.on_save = [&](const std::string& dir) {
    progress.clear();
    fmt::print(stderr, "saved {}\n", dir);
  };
  fmt::print(stderr,
             "sft: task {}, recipe {}{}, {} steps x {} sequences, micro-batches of <= {} tokens, from step {}\n",
             run.task().name(), run.learner().plan().name, cfg.learner.recipe.hybrid ? " (hybrid E5M2 gradients)" : "",
             cfg.steps, cfg.batch_size, cfg.learner.micro_batch_tokens, first);
  SftCliResult res;
  res.eval = run.run(a.out, ev);
  res.seconds = elapsed();
  res.tokens = tokens;
  progress.clear();
  fmt::print(stderr, "done: {} steps in {}, {:.0f} training tokens/s; final held-out accuracy {:.3f} ({}/{})\n",
             cfg.steps - first, format_duration(res.seconds), tokens / res.seconds, res.eval.accuracy, res.eval.correct,
             res.eval.total);
  const int64_t show = std::min<int64_t>(a.samples, static_cast<int64_t>(res.eval.samples.size()));
  if (show > 0) fmt::print("samples (greedy, held-out):\n");
  for (int64_t i = 0; i < show; ++i) {
    const EvalSample& s = res.eval.samples[i];
    fmt::print("  {}{}  {}{}\n", s.problem.prompt, s.completion, s.correct ? "ok" : "WRONG, expected ",
               s.correct ? "" : s.problem.answer);
  }
  if (!a.out.empty()) fmt::print(stderr, "final state: {}/final\n", a.out);
  return res;
}

void add_sft_options(CLI::App* c, SftCliArgs& a) { add_options(c, a.cfg, sft_fields()); }

namespace {
struct SftCmdArgs : SftCliArgs, RunFolderArgs {};

void run_sft_cmd(SftCmdArgs& a, CLI::App* c) {
  apply_run_config(c, a, a.out);
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, pair_kernel_from_name(a.kernels)};
  if (!a.resume.empty()) refuse_on_resume(c, sft_fields(), {"--model", "--data"});
  const RunSpec spec = run_spec(a, a.out, c);
  SftSession s = open_sft(spec, a.cfg, exec);
  run_sft_cli(a, s.run);
}
}  // namespace

void add_sft_command(CLI::App& app) {
  auto a = std::make_shared<SftCmdArgs>();
  auto* c = app.add_subcommand("sft", "Supervised fine-tuning on a verifiable task, evaluated through the sampler");
  add_run_folder_options(c, *a, a->out, "Checkpoint directory to start from (with tokenizer.json)");
  c->add_option("--metrics", a->metrics, "JSONL metrics file: one object per step and per evaluation");
  c->add_option("--samples", a->samples, "Held-out samples to print at the end")->capture_default_str();
  c->add_option("--log-every", a->log_every, "Steps between progress lines when stderr is not a terminal")
      ->check(at_least(1))
      ->capture_default_str();
  add_sft_options(c, *a);
  add_threads_option(c, &a->threads);
  add_kernels_option(c, &a->kernels);
  c->callback([a, c] { run_sft_cmd(*a, c); });
}

}  // namespace mxrl
