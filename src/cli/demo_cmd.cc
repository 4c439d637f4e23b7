// mxrl demo: the main job on its embedded default. Initialises the tiny
// dense preset (random weights, character tokenizer), warm-starts it with
// SFT on 3-digit addition demonstrated by a weak teacher that forgets 60% of
// its carries (MXFP8 recipe), then runs GRPO rewarded by the true sum, with
// the MXFP8 recipe and an on-grid MXFP8 sampler fed by `ship`, every sync
// verified by the seven checks (--checks stop: a failing check ends the
// demo). Prints held-out greedy accuracy before and after RL, and samples.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "cli/rl_cli.h"
#include "cli/settings_cli.h"
#include "cli/sft_cli.h"
#include "model/init.h"
#include "tasks/tasks.h"
#include "train/warm_start.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct DemoArgs : SftCliArgs {
  std::string preset = "tiny-dense";
  uint64_t init_seed = 0;
  std::string config;
  RlCliArgs rl;
  DemoArgs() {
    out = "mxrl-demo";
    cfg.task = "addition:digits=3,carry_drop=60";
    cfg.steps = 800;
    cfg.batch_size = 64;
    cfg.eval_every = 0;
    cfg.eval_problems = 500;
    cfg.learner.recipe.plan = "mxfp8";
    cfg.learner.optim.lr = 2e-3;
    cfg.learner.optim.warmup_steps = 30;
    cfg.learner.optim.weight_decay = 0.0;
    cfg.learner.optim.schedule = LrSchedule::Cosine;
    samples = 10;
    RlConfig& r = rl.cfg;
    r.steps = 300;
    r.prompts_per_step = 32;
    r.samples_per_prompt = 8;
    r.temperature = 1.0f;
    r.eval_every = 100;  // lr: RL's default (RlConfig)
    r.learner.optim.weight_decay = 0.0;
    rl.log_every = 10;
  }
};

// The GRPO phase's options: fields of rl_fields() under the demo's flags.
SettingsTable<RlConfig> demo_rl_fields() {
  const std::pair<const char*, const char*> pick[] = {{"steps", "rl-steps"},
                                                      {"optim.lr", "rl-lr"},
                                                      {"prompts_per_step", "prompts-per-step"},
                                                      {"samples_per_prompt", "samples-per-prompt"},
                                                      {"temperature", "temperature"}};
  SettingsTable<RlConfig> t;
  for (const auto& [key, flag] : pick)
    for (const SettingsField<RlConfig>& f : rl_fields())
      if (f.key == key) {
        t.push_back(f);
        t.back().flag = flag;
        t.back().help =
            f.key == "optim.lr" ? std::string("GRPO: peak learning rate (`mxrl rl`'s default)") : "GRPO: " + f.help;
      }
  return t;
}

void run_demo(DemoArgs& a, CLI::App* c) {
  namespace fs = std::filesystem;
  if (!a.config.empty()) apply_config_file(c, a.config);
  const std::string init = (fs::path(a.out) / "init").string();
  const std::string sft_out = (fs::path(a.out) / "sft").string(), rl_out = (fs::path(a.out) / "rl").string();
  fmt::print(stderr, "demo: 1/3 initialise the {} preset -> {}\n", a.preset, init);
  write_preset_checkpoint(init, a.preset, a.init_seed);
  ThreadPool pool(a.threads);
  fmt::print(stderr, "demo: 2/3 SFT warm start on {} ({} steps, {}){}\n", a.cfg.task, a.cfg.steps,
             a.cfg.learner.recipe.plan,
             make_task(a.cfg.task)->name().find("carry_drop=") != std::string::npos
                 ? "; the demonstrations are a weak teacher's that forgets carries, the RL reward is the true sum"
                 : "");
  SftCliArgs sft = a;
  sft.out = sft_out;
  sft.samples = 0;
  SftRun warm = SftRun::start(init, a.cfg, Exec{&pool});
  const SftCliResult s = run_sft_cli(sft, warm);
  fmt::print(stderr,
             "demo: 3/3 GRPO ({} steps x {} prompts x {} samples), {} learner, on-grid {} sampler fed by ship, "
             "seven checks on every sync\n",
             a.rl.cfg.steps, a.rl.cfg.prompts_per_step, a.rl.cfg.samples_per_prompt, a.cfg.learner.recipe.plan,
             a.cfg.learner.recipe.plan);
  RlCliArgs& r = a.rl;
  r.cfg.task = a.cfg.task;
  r.cfg.seed = a.cfg.seed + 1;  // fresh problems for RL
  r.cfg.learner.recipe = a.cfg.learner.recipe;
  r.cfg.eval_problems = a.cfg.eval_problems;
  r.out = rl_out;
  r.metrics = a.metrics.empty() ? "" : a.metrics + ".rl.jsonl";
  r.threads = a.threads;
  RlRun run = RlRun::start(sft_out + "/final", r.cfg, Exec{&pool});
  const RlCliResult res = run_rl_cli(r, run);
  const EvalResult& before = res.evals.front();
  const EvalResult& after = res.evals.back();
  fmt::print("samples (greedy, held-out, after RL):\n");
  for (int64_t i = 0; i < std::min<int64_t>(a.samples, static_cast<int64_t>(after.samples.size())); ++i) {
    const EvalSample& e = after.samples[i];
    fmt::print("  {}{}  {}{}\n", e.problem.prompt, e.completion, e.correct ? "ok" : "WRONG, expected ",
               e.correct ? "" : e.problem.answer);
  }
  fmt::print(
      "held-out greedy accuracy: {:.3f} after SFT ({} steps), {:.3f} after RL ({} steps, every sync passing "
      "all seven checks); {:.0f} s SFT + {:.0f} s RL\n",
      before.accuracy, a.cfg.steps, after.accuracy, res.steps, s.seconds, res.seconds);
}
}  // namespace

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* c =
      app.add_subcommand("demo", "The main job: init the tiny preset, SFT warm start, GRPO with checked weight syncs");
  c->add_option("--out", a->out, "Output directory (init/, sft/, rl/)")->capture_default_str();
  c->add_option("--preset", a->preset, "Preset model")->check(CLI::IsMember(preset_names()))->capture_default_str();
  c->add_option("--init-seed", a->init_seed, "Initialisation seed")->capture_default_str();
  c->add_option("--metrics", a->metrics, "JSONL metrics file of the SFT phase (the RL phase writes FILE.rl.jsonl)");
  c->add_option("--samples", a->samples, "Held-out samples to print")->capture_default_str();
  c->add_option("--config", a->config, "TOML file of settings (keys: the long options, _ for -); flags override it")
      ->check(CLI::ExistingFile);
  add_sft_options(c, *a);
  add_options(c, a->rl.cfg, demo_rl_fields());
  add_threads_option(c, &a->threads);
  c->callback([a, c] { run_demo(*a, c); });
}

}  // namespace mxrl
