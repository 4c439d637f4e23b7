// mxrl demo: the main job on its embedded default. Initialises the tiny
// dense preset (random weights, character tokenizer), fine-tunes it on
// 3-digit addition with the MXFP8 recipe, evaluating held-out problems by
// greedy decoding through the sampler (which runs on the learner's forward
// weights), and prints samples. Everything lands under --out.
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "model/init.h"
#include "cli/sft_cli.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
struct DemoArgs : SftCliArgs {
  std::string preset = "tiny-dense";
  uint64_t init_seed = 0;
  DemoArgs() {
    out = "mxrl-demo";
    cfg.task = "addition:digits=3";
    cfg.steps = 1200;
    cfg.batch_size = 64;
    cfg.eval_every = 200;
    cfg.eval_problems = 200;
    cfg.learner.recipe.plan = "mxfp8";
    cfg.learner.optim.lr = 2e-3;
    cfg.learner.optim.warmup_steps = 30;
    cfg.learner.optim.weight_decay = 0.0;
    schedule = "cosine";
    samples = 10;
  }
};

void run_demo(DemoArgs& a) {
  namespace fs = std::filesystem;
  apply_sft_options(a);
  const std::string init = (fs::path(a.out) / "init").string();
  fmt::print(stderr, "demo: 1/2 initialise the {} preset -> {}\n", a.preset, init);
  write_preset_checkpoint(init, a.preset, a.init_seed);
  fmt::print(stderr, "demo: 2/2 fine-tune on {} ({} steps), evaluate through the sampler\n", a.cfg.task, a.cfg.steps);
  ThreadPool pool(a.threads);
  const std::string train_out = a.out;
  rl::SftRun run = rl::SftRun::start(init, a.cfg, Exec{&pool});
  const SftCliResult r = run_sft_cli(a, run);
  fmt::print("held-out exact-match accuracy: {:.3f} ({}/{}) after {} steps, {:.0f} s\n", r.eval.accuracy,
             r.eval.correct, r.eval.total, a.cfg.steps, r.seconds);
}
}  // namespace

void add_demo_command(CLI::App& app) {
  auto a = std::make_shared<DemoArgs>();
  auto* c = app.add_subcommand("demo", "The main job: init the tiny preset, SFT it on addition (MXFP8), print samples");
  c->add_option("--out", a->out, "Output directory (init/, final/)")->capture_default_str();
  c->add_option("--preset", a->preset, "Preset model")->check(CLI::IsMember(preset_names()))
      ->capture_default_str();
  c->add_option("--init-seed", a->init_seed, "Initialisation seed")->capture_default_str();
  c->add_option("--metrics", a->metrics, "JSONL metrics file");
  c->add_option("--samples", a->samples, "Held-out samples to print")->capture_default_str();
  c->add_option("--save-every", a->cfg.save_every, "Keep a training-state directory every K steps")->capture_default_str();
  add_sft_options(c, *a);
  add_threads_option(c, &a->threads);
  c->callback([a] { run_demo(*a); });
}

}  // namespace mxrl::cli
