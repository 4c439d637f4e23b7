// mxrl sft: supervised fine-tuning on a built-in task or a JSONL dataset,
// with evaluation through the sampler, checkpoints and resume.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "util/progress.h"
#include "cli/sft_cli.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/metrics.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

SftCliResult run_sft_cli(const SftCliArgs& a, rl::SftRun& run) {
  const rl::SftConfig& cfg = run.config();
  MetricsSink metrics(a.metrics);
  Progress progress;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t first = run.step();
  double ema_loss = -1;
  int64_t tokens = 0;
  auto elapsed = [&] { return seconds_since(t0); };
  rl::SftEvents ev;
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
  ev.on_eval = [&](const rl::EvalResult& e) {
    metrics.write(nlohmann::json{{"step", e.step}, {"eval_accuracy", e.accuracy}, {"eval_correct", e.correct}, {"eval_total", e.total},
          {"eval_seconds", e.seconds}});
    progress.clear();
    fmt::print(stderr, "eval at step {}: accuracy {:.3f} ({}/{} held-out problems, greedy, {:.1f} s)\n", e.step,
               e.accuracy, e.correct, e.total, e.seconds);
  };
  ev.on_save = [&](const std::string& dir) {
    progress.clear();
    fmt::print(stderr, "saved {}\n", dir);
  };
  fmt::print(stderr, "sft: task {}, recipe {}{}, {} steps x {} sequences, micro-batches of <= {} tokens, from step {}\n",
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
    const rl::EvalSample& s = res.eval.samples[i];
    fmt::print("  {}{}  {}{}\n", s.problem.prompt, s.completion, s.correct ? "ok" : "WRONG, expected ",
               s.correct ? "" : s.problem.answer);
  }
  if (!a.out.empty()) fmt::print(stderr, "final state: {}/final\n", a.out);
  return res;
}

void add_learner_options(CLI::App* c, LearnerConfig& l, std::string& schedule) {
  c->add_option("--micro-batch-tokens", l.micro_batch_tokens, "Token budget of a micro-batch (sequences are packed)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--recipe", l.recipe.plan, "bf16, mxfp8 (or fp32, mxfp8-half, a plan .toml)")->capture_default_str();
  c->add_flag("--hybrid", l.recipe.hybrid, "MXFP8: E5M2 gradients (HYBRID)");
  c->add_flag("--floor", l.recipe.floor, "MXFP8: floor scale rule instead of rceil");
  c->add_flag("--requant-every-microbatch", l.recipe.requant_every_microbatch,
              "Remake the weight quantizations every micro-batch (to measure their cost)");
  c->add_option("--lr", l.optim.lr, "Peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--warmup", l.optim.warmup_steps, "Linear warmup steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--schedule", schedule, "constant or cosine")->check(CLI::IsMember({"constant", "cosine"}))->capture_default_str();
  c->add_option("--min-lr-ratio", l.optim.min_lr_ratio, "Cosine floor as a fraction of --lr")->capture_default_str();
  c->add_option("--weight-decay", l.optim.weight_decay, "AdamW decoupled weight decay (linears, embeddings)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--clip", l.optim.clip_norm, "Gradient clipping by global norm (0: off)")->capture_default_str();
  c->add_option("--beta1", l.optim.beta1, "AdamW beta1 (momentum)")->capture_default_str();
  c->add_option("--beta2", l.optim.beta2, "AdamW beta2")->capture_default_str();
  c->add_option("--aux-loss-coef", l.aux_loss_coef, "MoE load-balancing loss coefficient")->capture_default_str();
}

const std::vector<const char*>& learner_option_names() {
  static const std::vector<const char*> n = {"--micro-batch-tokens", "--recipe", "--hybrid", "--floor",
                                             "--requant-every-microbatch", "--lr", "--warmup", "--schedule",
                                             "--min-lr-ratio", "--weight-decay", "--clip", "--beta1", "--beta2",
                                             "--aux-loss-coef"};
  return n;
}

void add_sft_options(CLI::App* c, SftCliArgs& a) {
  rl::SftConfig& s = a.cfg;
  c->add_option("--task", s.task, "Built-in task: addition[:digits=D,carry_drop=P], multiplication[:digits=D], sort[:len=L,max=M], countdown[:count=C,max=M]")
      ->capture_default_str();
  c->add_option("--steps", s.steps, "Optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--batch-size", s.batch_size, "Sequences per optimizer step")->check(CLI::PositiveNumber)->capture_default_str();
  add_learner_options(c, s.learner, a.schedule);
  c->add_option("--eval-every", s.eval_every, "Steps between evaluations (0: only at the end)")->capture_default_str();
  c->add_option("--eval-problems", s.eval_problems, "Held-out problems per evaluation")->capture_default_str();
  c->add_option("--max-new-tokens", s.max_new_tokens, "Generation limit at evaluation (0: longest answer + 8)")->capture_default_str();
  c->add_option("--seed", s.seed, "Problem stream seed")->capture_default_str();
}

void apply_sft_options(SftCliArgs& a) { apply_schedule(a.cfg.learner, a.schedule); }

namespace {
struct SftCmdArgs : SftCliArgs {
  std::string model, data, resume;
};

void run_sft_cmd(SftCmdArgs& a, CLI::App* c) {
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, pair_kernel_from_name(a.kernels)};
  if (!a.resume.empty()) {
    std::vector<const char*> fixed = {"--model", "--task", "--data", "--steps", "--batch-size", "--eval-every",
                                      "--eval-problems", "--max-new-tokens", "--seed", "--save-every"};
    fixed.insert(fixed.end(), learner_option_names().begin(), learner_option_names().end());
    for (const char* opt : fixed)
      if (c->count(opt) > 0) fail("--resume continues a run with its original settings; {} cannot be changed", opt);
    rl::SftRun run = rl::SftRun::resume(a.resume, exec);
    run_sft_cli(a, run);
    return;
  }
  if (a.model.empty()) fail("give --model DIR (or --resume STATE_DIR)");
  if (!a.data.empty()) {
    if (c->count("--task") > 0) fail("give --task or --data, not both");
    a.cfg.task = "jsonl:" + a.data;
  }
  apply_sft_options(a);
  rl::SftRun run = rl::SftRun::start(a.model, a.cfg, exec);
  run_sft_cli(a, run);
}
}  // namespace

void add_sft_command(CLI::App& app) {
  auto a = std::make_shared<SftCmdArgs>();
  auto* c = app.add_subcommand("sft", "Supervised fine-tuning on a verifiable task, evaluated through the sampler");
  c->add_option("--model", a->model, "Checkpoint directory to start from (with tokenizer.json)")->check(CLI::ExistingDirectory);
  c->add_option("--data", a->data, "JSONL dataset: {\"prompt\": ..., \"answer\": ...} per line")->check(CLI::ExistingFile);
  c->add_option("--resume", a->resume, "Training-state directory to continue (its settings are kept)")->check(CLI::ExistingDirectory);
  c->add_option("--out", a->out, "Output directory: step-NNNNNN/ every --save-every steps, and final/")->required();
  c->add_option("--save-every", a->cfg.save_every, "Keep a training-state directory every K steps (0: only final)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--metrics", a->metrics, "JSONL metrics file: one object per step and per evaluation");
  c->add_option("--samples", a->samples, "Held-out samples to print at the end")->capture_default_str();
  c->add_option("--log-every", a->log_every, "Steps between progress lines when stderr is not a terminal")
      ->check(CLI::PositiveNumber)->capture_default_str();
  add_sft_options(c, *a);
  add_threads_option(c, &a->threads);
  add_kernels_option(c, &a->kernels);
  c->callback([a, c] { run_sft_cmd(*a, c); });
}

}  // namespace mxrl::cli
