// mxrl faults: the sync fault matrix (experiments/fault_matrix.h). Without warm starts
// given, it initialises the tiny dense and MoE presets and SFT-trains each
// (the MoE one under an MXFP8 plan with an FP32 router, so that router-bf16
// applies), then runs every fault twice (checks on, checks off) and writes
// faults.md and faults.json.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/config_file.h"
#include "experiments/fault_matrix.h"
#include "faults/faults.h"
#include "train/warm_start.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
namespace fs = std::filesystem;

struct FaultsArgs {
  std::string out;
  FaultMatrixConfig cfg;
  int64_t sft_steps = 300;
  std::vector<std::string> presets = {"dense", "moe"};
  bool list = false;
  int threads = 0;
  std::string config;
};

void print_list() {
  fmt::print("{:<20} {:<3} {:<11} {:<8} {}\n", "fault", "", "condition", "seam", "what goes wrong");
  for (const FaultInfo& f : fault_table())
    fmt::print("{:<20} {:<3} {:<11} {:<8} {}{}\n", f.name, f.condition, condition_name(f.condition), seam_name(f.seam),
               f.what,
               f.needs_moe          ? " [MoE]"
               : f.needs_tied_head  ? " [tied head]"
               : f.needs_requantize ? " [--sync requantize]"
                                    : "");
}

// init + SFT warm start of a preset, under out/warm/<name>; returns the final checkpoint.
std::string warm_start(const FaultsArgs& a, const std::string& preset, const std::string& recipe, ThreadPool& pool) {
  WarmStartConfig w;
  w.preset = preset, w.task = a.cfg.task, w.recipe = recipe, w.sft_steps = a.sft_steps;
  Progress bar(std::chrono::milliseconds(200));
  const WarmStart ws =
      warm_start((fs::path(a.out) / "warm" / preset).string(), w,
                 [&](int64_t step, double loss) {
                   bar.show(fmt::format("{} SFT {} {}/{} loss {:.4f}", preset, Progress::bar(step, a.sft_steps, 20),
                                        step, a.sft_steps, loss));
                   if (!bar.on() && step % 100 == 0)
                     fmt::print(stderr, "faults: {} SFT step {}/{} loss {:.4f}\n", preset, step, a.sft_steps, loss);
                 },
                 Exec{&pool});
  bar.clear();
  fmt::print(stderr, "faults: {} warm start: {} SFT steps, held-out greedy accuracy {:.3f}\n", preset, a.sft_steps,
             ws.accuracy);
  return ws.model;
}

void run_faults(FaultsArgs& a) {
  if (a.list) {
    print_list();
    return;
  }
  if (a.out.empty()) throw CLI::ValidationError("--out", "required (or --list)");
  ThreadPool pool(a.threads);
  fs::create_directories(a.out);
  if (a.cfg.moe_recipe == "mxfp8-router-fp32") a.cfg.moe_recipe = write_router_fp32_plan(a.out);
  auto wanted = [&](const char* p) { return std::find(a.presets.begin(), a.presets.end(), p) != a.presets.end(); };
  if (!wanted("dense"))
    a.cfg.dense_model.clear();
  else if (a.cfg.dense_model.empty())
    a.cfg.dense_model = warm_start(a, "tiny-dense", a.cfg.dense_recipe, pool);
  if (!wanted("moe"))
    a.cfg.moe_model.clear();
  else if (a.cfg.moe_model.empty())
    a.cfg.moe_model = warm_start(a, "tiny-moe", a.cfg.moe_recipe, pool);
  int64_t n = 0;
  const FaultMatrix m = run_fault_matrix(
      a.cfg, [&](const std::string& line) { fmt::print(stderr, "faults: [{}] {}\n", ++n, line); }, Exec{&pool});
  write_fault_matrix(m, a.out);
  fmt::print("{}", m.to_markdown());
  fmt::print(stderr, "wrote {}/faults.md and {}/faults.json\n", a.out, a.out);
}
}  // namespace

void add_faults_command(CLI::App& app) {
  auto a = std::make_shared<FaultsArgs>();
  a->cfg.moe_recipe = "mxfp8-router-fp32";
  auto* c = app.add_subcommand("faults", "The sync fault matrix: every fault on short GRPO runs, checks on and off");
  c->add_option("--out", a->out, "Output directory: faults.md, faults.json (and warm/ when it trains warm starts)");
  c->add_option("--config", a->config, "TOML file of settings (keys: the long options, _ for -); flags override it")
      ->check(CLI::ExistingFile);
  c->add_flag("--list", a->list, "List the faults (name, condition, seam, what goes wrong) and exit");
  c->add_option("--dense-model", a->cfg.dense_model, "Dense warm start (default: init tiny-dense + SFT)");
  c->add_option("--moe-model", a->cfg.moe_model, "MoE warm start (default: init tiny-moe + SFT)");
  c->add_option("--dense-recipe", a->cfg.dense_recipe, "Dense recipe (the sampler runs the same plan)")
      ->capture_default_str();
  c->add_option("--moe-recipe", a->cfg.moe_recipe,
                "MoE recipe (mxfp8-router-fp32: MXFP8 with an FP32 router, written to OUT)")
      ->capture_default_str();
  c->add_option("--presets", a->presets, "Which presets to run")
      ->delimiter(',')
      ->check(CLI::IsMember({"dense", "moe"}))
      ->capture_default_str();
  c->add_option("--sft-steps", a->sft_steps, "SFT steps of each warm start")->check(at_least(1))->capture_default_str();
  c->add_option("--task", a->cfg.task, "Task")->capture_default_str();
  c->add_option("--steps", a->cfg.steps, "RL steps per run")->check(at_least(1))->capture_default_str();
  c->add_option("--inject-step", a->cfg.inject_step, "Step whose sync first carries the fault")
      ->check(at_least(1))
      ->capture_default_str();
  c->add_option("--prompts-per-step", a->cfg.prompts_per_step, "Prompts per step")
      ->check(at_least(1))
      ->capture_default_str();
  c->add_option("--samples-per-prompt", a->cfg.samples_per_prompt, "Samples per prompt")
      ->check(at_least(1))
      ->capture_default_str();
  c->add_option("--lr", a->cfg.lr, "RL learning rate")->check(positive())->capture_default_str();
  c->add_option("--seed", a->cfg.seed, "Problem and sampling seed")->capture_default_str();
  c->add_option("--visible-drop", a->cfg.visible_drop, "Reward drop that counts as visible without checks")
      ->capture_default_str();
  c->add_option("--only", a->cfg.only, "Run only these faults")->delimiter(',');
  add_threads_option(c, &a->threads);
  c->callback([a, c] {
    if (!a->config.empty()) apply_config_file(c, a->config);
    run_faults(*a);
  });
}

}  // namespace mxrl
