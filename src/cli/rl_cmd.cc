// mxrl rl: GRPO on a verifiable task, with every weight sync checked live.
#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "util/progress.h"
#include "cli/rl_cli.h"
#include "cli/sft_cli.h"
#include "rl/distributed.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/metrics.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

std::string checks_summary(const sync::SyncReport& r) {
  if (!r.applied) return "SYNC FAILED";
  int64_t ran = 0, passed = 0;
  for (const sync::CheckResult& c : r.checks) ran += c.ran, passed += c.ran && c.passed;
  return ran == 0 ? "checks off" : fmt::format("checks {}/{}", passed, ran);
}
}  // namespace

void add_rl_options(CLI::App* c, RlCliArgs& a) {
  rl::RlConfig& s = a.cfg;
  c->add_option("--task", s.task, "Built-in task (addition[:digits=D,carry_drop=P], multiplication, sort, countdown)")->capture_default_str();
  c->add_option("--steps", s.steps, "RL steps (each: generate, score, update, sync)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--prompts-per-step", s.prompts_per_step, "Prompts per step (P)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--samples-per-prompt", s.samples_per_prompt, "Samples per prompt (G)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--max-new-tokens", s.max_new_tokens, "Generation limit (0: longest answer + 8)")->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--temperature", s.temperature, "Sampling temperature (the learner scores at the same one)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--seed", s.seed, "Problem stream and sampling seed")->capture_default_str();
  c->add_option("--adv-norm", a.adv_norm, "Advantage: std ((r - mean) / (std + eps)) or none (r - mean, Dr. GRPO)")
      ->check(CLI::IsMember({"std", "none"}))->capture_default_str();
  c->add_option("--adv-eps", s.adv_eps, "eps of the advantage normalisation")->capture_default_str();
  c->add_option("--clip-low", s.loss.clip_low, "PPO clip: ratio >= 1 - clip_low")->capture_default_str();
  c->add_option("--clip-high", s.loss.clip_high, "PPO clip: ratio <= 1 + clip_high")->capture_default_str();
  c->add_option("--loss-agg", a.loss_agg, "token-mean, seq-mean-token-sum or seq-mean-token-mean")
      ->check(CLI::IsMember({"token-mean", "seq-mean-token-sum", "seq-mean-token-mean"}))->capture_default_str();
  c->add_option("--rollout-correction", a.correction, "none, tis (truncated importance weights) or mis (masking)")
      ->check(CLI::IsMember({"none", "tis", "mis"}))->capture_default_str();
  c->add_option("--correction-cap", s.loss.cap, "C of TIS / MIS")->capture_default_str();
  c->add_option("--updates-per-batch", s.updates_per_batch, "Mini-batch updates per step (K)")->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--sampler-plan", s.sampler_plan, "The sampler's precision plan (default: the recipe's): bf16, mxfp8, mxfp8-half, mxfp8-floor, fp8-block128, +fp8kv, a .toml");
  c->add_option("--sync", a.sync, "ship (the learner's forward weights, byte for byte) or requantize (BF16 copies, quantized by the sampler)")
      ->check(CLI::IsMember({"ship", "requantize"}))->capture_default_str();
  c->add_option("--checks", a.checks, "stop (a failed check ends the run), warn, or off")
      ->check(CLI::IsMember({"stop", "warn", "off"}))->capture_default_str();
  c->add_option("--inject", s.inject,
                "Inject a sync fault, NAME or NAME@STEP (from the sync that ends step STEP; repeatable). "
                "See `mxrl faults --list`")
      ->take_all();
  c->add_option("--agreement-every", s.agreement_every, "Run the agreement check on every Nth version (0: never)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--agreement-max-kl", s.agreement_max_kl, "Agreement bound when the plans differ: mean exact KL per token")->capture_default_str();
  c->add_option("--agreement-max-abs-dlogp", s.agreement_max_abs_dlogp, "Agreement bound when the plans differ: max |dlogp|")->capture_default_str();
  c->add_option("--probe-prompts", s.probe_prompts, "Held-out prompts (with answers) in the agreement probe")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--off-policy", s.off_policy,
                "0: on-policy; 1: the samplers generate step t+1 under version t while the learner trains step t "
                "(staleness beyond it is refused)")
      ->check(CLI::Range(0, 1))->capture_default_str();
  c->add_option("--sync-chunk-bytes", s.sync_chunk_bytes, "Payload bytes per chunk of a weight sync on the wire")
      ->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--eval-every", s.eval_every, "Steps between held-out greedy evaluations (0: before and after only)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--eval-problems", s.eval_problems, "Held-out problems per evaluation")->check(CLI::NonNegativeNumber)->capture_default_str();
  add_learner_options(c, s.learner, a.schedule);
}

const std::vector<const char*>& rl_option_names() {
  static const std::vector<const char*> n = [] {
    std::vector<const char*> v = {"--model", "--task", "--data", "--steps", "--prompts-per-step", "--samples-per-prompt",
                                  "--max-new-tokens", "--temperature", "--seed", "--adv-norm", "--adv-eps", "--clip-low",
                                  "--clip-high", "--loss-agg", "--rollout-correction", "--correction-cap",
                                  "--updates-per-batch", "--sampler-plan", "--sync", "--checks", "--agreement-every",
                                  "--agreement-max-kl", "--agreement-max-abs-dlogp", "--probe-prompts", "--eval-every",
                                  "--eval-problems", "--save-every", "--config", "--inject", "--off-policy",
                                  "--sync-chunk-bytes"};
    v.insert(v.end(), learner_option_names().begin(), learner_option_names().end());
    return v;
  }();
  return n;
}

void apply_rl_options(RlCliArgs& a) {
  apply_schedule(a.cfg.learner, a.schedule);
  a.cfg.adv_norm = rl::parse_adv_norm(a.adv_norm);
  a.cfg.loss.agg = rl::parse_loss_agg(a.loss_agg);
  a.cfg.loss.correction = rl::parse_rollout_correction(a.correction);
  a.cfg.sync = sync::parse_sync_mode(a.sync);
  a.cfg.checks = sync::parse_check_mode(a.checks);
}

RlCliResult run_rl_cli(const RlCliArgs& a, rl::RlRun& run) {
  const rl::RlConfig& cfg = run.config();
  MetricsSink metrics(a.metrics);
  Progress progress;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return seconds_since(t0); };
  const int64_t first = run.step();
  rl::RlEvents ev;
  ev.on_step = [&](const rl::RlStepStats& st) {
    metrics.write(st.to_json());
    const double done = static_cast<double>(st.step - first) / static_cast<double>(cfg.steps - first);
    const double eta = done > 0 ? elapsed() * (1 - done) / done : 0;
    const auto& mm = st.mismatch;
    const std::string line = fmt::format(
        "{} step {}/{} reward {:.3f} len {:.1f} kl {:.2e} |dlogp|max {:.2e} {} {:.0f} tok/s eta {}",
        Progress::bar(done, 1, 20), st.step, cfg.steps, st.reward_mean, st.response_len_mean,
        num(mm, "kl_mean"), num(mm, "abs_dlogp_max"), checks_summary(st.sync),
        st.seconds > 0 ? st.tokens / st.seconds : 0.0, format_duration(eta));
    if (progress.on())
      progress.show(line);
    else if (st.step % a.log_every == 0 || st.step == cfg.steps)
      fmt::print(stderr, "{}\n", line);
    if (!st.sync.passed()) {
      progress.clear();
      for (const std::string& f : st.sync.findings()) fmt::print(stderr, "warning: version {}: {}\n", st.sync.version, f);
    }
  };
  ev.on_eval = [&](const rl::EvalResult& e) {
    metrics.write(nlohmann::json{{"step", e.step}, {"eval_accuracy", e.accuracy}, {"eval_correct", e.correct},
                                 {"eval_total", e.total}, {"eval_seconds", e.seconds}});
    progress.clear();
    fmt::print(stderr, "eval at step {}: held-out greedy accuracy {:.3f} ({}/{}, {:.1f} s)\n", e.step, e.accuracy,
               e.correct, e.total, e.seconds);
  };
  ev.on_save = [&](const std::string& dir) {
    progress.clear();
    fmt::print(stderr, "saved {}\n", dir);
  };
  fmt::print(stderr,
             "rl: task {}, recipe {}, sampler {} fed by {}{}, {} steps x {} prompts x {} samples, checks {}, {}from step {}\n",
             run.task().name(), run.learner().plan().name, run.sampler_plan().name, sync::sync_mode_name(cfg.sync),
             run.last_sync().checks.empty() ? "" : (run.last_sync().passed() ? " (first sync: all checks pass)" : " (first sync: CHECKS FAILED)"),
             cfg.steps, cfg.prompts_per_step, cfg.samples_per_prompt, sync::check_mode_name(cfg.checks),
             run.colocated() ? "" : fmt::format("{} learner + {} sampler processes, ", a.learners, a.samplers), first);
  metrics.write(nlohmann::json{{"step", first}, {"sync", run.last_sync().to_json()}});
  RlCliResult res;
  res.evals = run.run(a.out, ev);
  res.seconds = elapsed();
  res.steps = cfg.steps - first;
  progress.clear();
  if (res.evals.size() >= 2)
    fmt::print(stderr, "done: {} RL steps in {}; held-out greedy accuracy {:.3f} -> {:.3f}\n", res.steps,
               format_duration(res.seconds), res.evals.front().accuracy, res.evals.back().accuracy);
  if (!a.out.empty()) fmt::print(stderr, "final state: {}/final\n", a.out);
  return res;
}

namespace {
struct RlCmdArgs : RlCliArgs {
  std::string model, data, resume, config;
};
}  // namespace

namespace {

// mpirun -np L+S mxrl rl ... --learners L --samplers S: rank 0 runs the loop
// below with the cluster doing rollout, training and sync; the others serve.
void run_distributed(RlCmdArgs& a, CLI::App* c, const Exec& exec) {
  mpi::Session session(nullptr, nullptr);
  rl::Cluster cluster(a.learners, a.samplers);
  if (!cluster.coordinator()) return cluster.serve(exec);
  std::optional<rl::RlRun> run;  // outlives stop(), which compares the learners' weights with its own
  try {
    auto remote = cluster.remote(exec);
    run.emplace(a.resume.empty() ? rl::RlRun::start_remote(a.model, a.cfg, remote, exec)
                                 : rl::RlRun::resume_remote(a.resume, remote, exec));
    run_rl_cli(a, *run);
  } catch (const Error&) {
    cluster.stop(run.has_value());  // every other rank ends cleanly (or the job is aborted mid-exchange); then the error
    throw;
  }
  cluster.stop();
}

void run_rl_cmd(RlCmdArgs& a, CLI::App* c) {
  if (!a.config.empty()) apply_config_file(c, a.config);
  if (a.out.empty()) fail("give --out DIR (on the command line or as out = \"DIR\" in --config)");
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, pair_kernel_from_name(a.kernels)};
  const bool distributed = a.learners > 0 || a.samplers > 0;
  if (distributed && (a.learners < 1 || a.samplers < 1))
    fail("a distributed run needs both --learners L and --samplers S (each at least 1), got {} and {}", a.learners,
         a.samplers);
  if (!a.resume.empty()) {
    for (const char* opt : rl_option_names())
      if (c->count(opt) > 0) fail("--resume continues a run with its original settings; {} cannot be changed", opt);
    if (distributed) return run_distributed(a, c, exec);
    rl::RlRun run = rl::RlRun::resume(a.resume, exec);
    run_rl_cli(a, run);
    return;
  }
  if (a.model.empty()) fail("give --model DIR (or --resume STATE_DIR)");
  if (!a.data.empty()) {
    if (c->count("--task") > 0) fail("give --task or --data, not both");
    a.cfg.task = "jsonl:" + a.data;
  }
  apply_rl_options(a);
  if (distributed) return run_distributed(a, c, exec);
  rl::RlRun run = rl::RlRun::start(a.model, a.cfg, exec);
  run_rl_cli(a, run);
}
}  // namespace

void add_rl_command(CLI::App& app) {
  auto a = std::make_shared<RlCmdArgs>();
  auto* c = app.add_subcommand("rl", "GRPO on a verifiable task; every weight sync to the sampler checked live (seven checks)");
  c->add_option("--model", a->model, "Checkpoint directory to start from (with tokenizer.json), e.g. an SFT final/")
      ->check(CLI::ExistingDirectory);
  c->add_option("--data", a->data, "JSONL dataset: {\"prompt\": ..., \"answer\": ...} per line")->check(CLI::ExistingFile);
  c->add_option("--resume", a->resume, "Training-state directory to continue (its settings are kept)")->check(CLI::ExistingDirectory);
  c->add_option("--config", a->config, "TOML file of settings (keys: the long options, _ for -); flags override it")
      ->check(CLI::ExistingFile);
  c->add_option("--out", a->out, "Output directory (required): step-NNNNNN/ every --save-every steps, and final/");
  c->add_option("--save-every", a->cfg.save_every, "Keep a training-state directory every K steps (0: only final)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  c->add_option("--metrics", a->metrics, "JSONL metrics file: one object per step, sync and evaluation");
  c->add_option("--learners", a->learners,
                "Distributed (under mpirun): data-parallel learner processes; world ranks 0..L-1 (0 coordinates)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--samplers", a->samplers, "Distributed (under mpirun): sampler processes, world ranks L..L+S-1")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--log-every", a->log_every, "Steps between progress lines when stderr is not a terminal")
      ->check(CLI::PositiveNumber)->capture_default_str();
  add_rl_options(c, *a);
  add_threads_option(c, &a->threads);
  add_kernels_option(c, &a->kernels);
  c->callback([a, c] { run_rl_cmd(*a, c); });
}

}  // namespace mxrl::cli
