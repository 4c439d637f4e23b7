// mxrl report / mxrl experiment: the experiments behind the paper's claims
// (experiments/report.h), all of them or one, and the report rendered from
// their JSON by scripts/report.py.
#include <fmt/format.h>

#include <chrono>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "experiments/report.h"
#include "util/clock.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct ReportArgs {
  ReportConfig cfg;
  std::string part;  // experiment: the one part
  int threads = 0;
  std::string config;
};

void run(ReportArgs a) {
  if (!a.part.empty()) a.cfg.parts = {a.part};
  ThreadPool pool(a.threads);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  run_report(
      a.cfg,
      [&](const std::string& line) {
        const double s = seconds_since(t0);
        fmt::print(stderr, "report: [{} {:.0f} s] {}\n", ++n, s, line);
      },
      Exec{&pool});
  fmt::print(stderr, "report: wrote {}/README.md{} in {:.0f} s\n", a.cfg.out,
             a.cfg.render ? " and its plots" : " (not rendered)", seconds_since(t0));
}

void add_options(CLI::App* c, ReportArgs& a) {
  c->add_option("--config", a.config, "TOML file of settings (keys: the long options, _ for -); flags override it")
      ->check(CLI::ExistingFile);
  c->add_option("--out", a.cfg.out, "Output directory (JSON, README.md, PNG plots)")->capture_default_str();
  c->add_flag("--quick", a.cfg.quick, "Every part at a size small enough for CI (about a minute)");
  c->add_option("--dense-model", a.cfg.dense_model, "Dense warm start (default: init tiny-dense + SFT under OUT/warm)");
  c->add_option("--moe-model", a.cfg.moe_model, "MoE warm start (default: init tiny-moe + SFT under OUT/warm)");
  c->add_option("--task", a.cfg.task, "Task of the warm starts and the experiments")->capture_default_str();
  c->add_option("--sft-steps", a.cfg.sft_steps, "SFT steps of each warm start (0: 800, --quick 30)")
      ->check(non_negative())
      ->capture_default_str();
  c->add_flag("!--no-qwen-shape", a.cfg.qwen_shape, "Speed: skip the RL steps on the Qwen3-0.6B shape");
  c->add_option("--python", a.cfg.python, "Python with matplotlib that draws the report")->capture_default_str();
  c->add_option("--script", a.cfg.script, "The report script (default: the source tree's scripts/report.py)");
  c->add_flag("!--no-render", a.cfg.render, "Write the JSON only");
  c->add_option("--engine-python", a.cfg.engine_python,
                "Engine part: a Python with vLLM and mxrl-vllm (default: the source tree's build-py/venv, which "
                "scripts/vllm.sh makes)");
  add_threads_option(c, &a.threads);
}
}  // namespace

void add_report_commands(CLI::App& app) {
  auto r = std::make_shared<ReportArgs>();
  auto* c = app.add_subcommand("report",
                               "Run the experiments (matching, KL during RL, speed, sync faults) and write "
                               "the report: JSON, README.md and plots");
  add_options(c, *r);
  c->add_option("--parts", r->cfg.parts, "Parts to run")
      ->delimiter(',')
      ->check(CLI::IsMember(report_parts()))
      ->capture_default_str();
  c->callback([r, c] {
    if (!r->config.empty()) apply_config_file(c, r->config);
    run(*r);
  });

  auto e = std::make_shared<ReportArgs>();
  auto* x = app.add_subcommand("experiment", "Run one experiment of the report and re-render it");
  x->add_option("name", e->part, "matching, rl-kl, speed, faults or engine (a live vLLM engine as the sampler)")->required()->check(CLI::IsMember(report_parts()));
  add_options(x, *e);
  x->callback([e, x] {
    if (!e->config.empty()) apply_config_file(x, e->config);
    run(*e);
  });
}

}  // namespace mxrl
