// mxrl rl: GRPO on a verifiable task, with every weight sync checked live.
#include <fmt/format.h>

#include <chrono>

#include "cli/commands.h"
#include "cli/rl_cli.h"
#include "cli/run_cli.h"
#include "cli/settings_cli.h"
#include "dist/distributed.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/metrics.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

std::string checks_summary(const SyncReport& r) {
  if (!r.applied) return "SYNC FAILED";
  int64_t ran = 0, passed = 0;
  for (const CheckResult& c : r.checks) ran += c.ran, passed += c.ran && c.passed;
  return ran == 0 ? "checks off" : fmt::format("checks {}/{}", passed, ran);
}
}  // namespace

void add_rl_options(CLI::App* c, RlCliArgs& a) { add_options(c, a.cfg, rl_fields()); }

RlCliResult run_rl_cli(const RlCliArgs& a, RlRun& run) {
  const RlConfig& cfg = run.config();
  MetricsSink metrics(a.metrics);
  Progress progress;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return seconds_since(t0); };
  const int64_t first = run.step();
  RlEvents ev;
  ev.on_step = [&](const RlStepStats& st) {
    metrics.write(st.to_json());
    const double done = static_cast<double>(st.step - first) / static_cast<double>(cfg.steps - first);
    const double eta = done > 0 ? elapsed() * (1 - done) / done : 0;
    const auto& mm = st.mismatch;
    const std::string line =
        fmt::format("{} step {}/{} reward {:.3f} len {:.1f} kl {:.2e} |dlogp|max {:.2e} {} {:.0f} tok/s eta {}",
                    Progress::bar(done, 1, 20), st.step, cfg.steps, st.reward_mean, st.response_len_mean,
                    num(mm, "kl_mean"), num(mm, "abs_dlogp_max"), checks_summary(st.sync),
                    st.seconds > 0 ? st.tokens / st.seconds : 0.0, format_duration(eta));
    if (progress.on())
      progress.show(line);
    else if (st.step % a.log_every == 0 || st.step == cfg.steps)
      fmt::print(stderr, "{}\n", line);
    if (!st.sync.passed()) {
      progress.clear();
      for (const std::string& f : st.sync.findings())
        fmt::print(stderr, "warning: version {}: {}\n", st.sync.version, f);
    }
  };
  ev.on_eval = [&](const EvalResult& e) {
    metrics.write(e.to_json());
    progress.clear();
    fmt::print(stderr, "eval at step {}: held-out greedy accuracy {:.3f} ({}/{}, {:.1f} s)\n", e.step, e.accuracy,
               e.correct, e.total, e.seconds);
  };
  ev.on_save = [&](const std::string& dir) {
    progress.clear();
    fmt::print(stderr, "saved {}\n", dir);
  };
  fmt::print(
      stderr,
      "rl: task {}, recipe {}, sampler {} fed by {}{}, {} steps x {} prompts x {} samples, checks {}, {}from step {}\n",
      run.task().name(), run.learner().plan().name, run.sampler_plan().name, sync_mode_name(cfg.sync),
      run.last_sync().checks.empty()
          ? ""
          : (run.last_sync().passed() ? " (first sync: all checks pass)" : " (first sync: CHECKS FAILED)"),
      cfg.steps, cfg.prompts_per_step, cfg.samples_per_prompt, check_mode_name(cfg.checks),
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
struct RlCmdArgs : RlCliArgs, RunFolderArgs {};
}  // namespace

namespace {

void run_rl_cmd(RlCmdArgs& a, CLI::App* c) {
  apply_run_config(c, a, a.out);
  ThreadPool pool(a.threads);
  const Exec exec{&pool, Backend::Auto, pair_kernel_from_name(a.kernels)};
  if (!a.resume.empty()) refuse_on_resume(c, rl_fields(), {"--model", "--data"});
  const RunSpec spec = run_spec(a, a.out, c);
  run_rl_job(spec, a.cfg, a.learners, a.samplers, exec, [&](RlRun& run) { run_rl_cli(a, run); });
}
}  // namespace

void add_rl_command(CLI::App& app) {
  auto a = std::make_shared<RlCmdArgs>();
  auto* c = app.add_subcommand(
      "rl", "GRPO on a verifiable task; every weight sync to the sampler checked live (seven checks)");
  add_run_folder_options(c, *a, a->out, "Checkpoint directory to start from (with tokenizer.json), e.g. an SFT final/");
  c->add_option("--metrics", a->metrics, "JSONL metrics file: one object per step, sync and evaluation");
  c->add_option("--learners", a->learners,
                "Distributed (under mpirun): data-parallel learner processes; world ranks 0..L-1 (0 coordinates)")
      ->check(non_negative());
  c->add_option("--samplers", a->samplers, "Distributed (under mpirun): sampler processes, world ranks L..L+S-1")
      ->check(non_negative());
  c->add_option("--log-every", a->log_every, "Steps between progress lines when stderr is not a terminal")
      ->check(at_least(1))
      ->capture_default_str();
  add_rl_options(c, *a);
  add_threads_option(c, &a->threads);
  add_kernels_option(c, &a->kernels);
  c->callback([a, c] { run_rl_cmd(*a, c); });
}

}  // namespace mxrl
