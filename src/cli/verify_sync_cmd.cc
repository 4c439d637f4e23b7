// mxrl verify-sync: conditions 1-4 of a weight sync (docs/reference.md §6) checked on
// another engine's weights, as that engine dumped them (interop/engine_dump.h),
// against what the learner's checkpoint under its recipe says they must be.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "interop/engine_dump.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct VerifyArgs {
  std::string learner, recipe = "mxfp8", dump, naming = "vllm", previous;
  bool floor = false, hybrid = false, json = false;
  int threads = 0;
};

void run_verify(const VerifyArgs& a) {
  const Naming naming = parse_naming(a.naming);
  Recipe recipe;
  recipe.plan = a.recipe, recipe.hybrid = a.hybrid, recipe.floor = a.floor;
  const PrecisionPlan plan = recipe.precision_plan();
  const Checkpoint ck = load_checkpoint(a.learner);
  ThreadPool pool(a.threads);
  const std::vector<TensorDigest> live = read_dump_manifest(a.dump, ck.config, plan, naming);
  std::vector<TensorDigest> previous;
  if (!a.previous.empty()) previous = read_dump_manifest(a.previous, ck.config, plan, naming);
  const std::vector<CheckResult> r = verify_dump_since(ck.params, plan, a.dump, naming, previous, {&pool});
  std::vector<std::string> failed;
  for (const CheckResult& c : r)
    if (!c.passed)
      failed.push_back(fmt::format("{} ({} finding{})", c.name, c.findings.size(), c.findings.size() == 1 ? "" : "s"));
  if (a.json) {
    nlohmann::json j = {{"dump", a.dump},
                        {"naming", a.naming},
                        {"learner", a.learner},
                        {"plan", plan.name},
                        {"tensors", live.size()},
                        {"passed", failed.empty()},
                        {"checks", nlohmann::json::array()}};
    for (const CheckResult& c : r)
      j["checks"].push_back({{"name", c.name}, {"passed", c.passed}, {"findings", c.findings}});
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("{} ({} naming, {} tensor parts) against {} under {}{}:\n", a.dump, a.naming, live.size(), a.learner,
               plan.name, a.previous.empty() ? "" : fmt::format(", previous {}", a.previous));
    for (const CheckResult& c : r) {
      fmt::print("  {:<11} {}\n", c.name, c.passed ? "PASS" : "FAIL");
      for (const std::string& f : c.findings) fmt::print("    {}\n", f);
    }
  }
  if (!failed.empty()) fail("{}: fails {}", a.dump, fmt::join(failed, ", "));
}
}  // namespace

void add_verify_sync_command(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  auto* c = app.add_subcommand(
      "verify-sync",
      "Check another engine's weights (a safetensors dump of what it computes with) against the learner's: "
      "conditions 1-4 of a weight sync (coverage, placement, grid, exceptions). Prints PASS/FAIL per condition with "
      "its findings; exits 0 when all pass, 1 when any fails or an input is malformed (one line on stderr).");
  c->add_option("--learner", a->learner, "The learner's checkpoint directory (its FP32/BF16 masters)")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("--recipe", a->recipe,
                "The learner's plan, which the sampler must run: mxfp8, bf16 (or fp32, mxfp8-half, a plan .toml)")
      ->capture_default_str();
  c->add_flag("--floor", a->floor, "MXFP8: floor scale rule instead of rceil");
  c->add_flag("--hybrid", a->hybrid, "MXFP8: E5M2 gradients (does not change the forward weights)");
  c->add_option("--sampler-dump", a->dump, "The engine's weight dump (.safetensors)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--naming", a->naming,
                "Tensor layout of the dump: vllm (vLLM's Qwen3 parameters: fused qkv_proj / gate_up_proj, stacked "
                "experts w13_weight / w2_weight, U8 or F8_E8M0 scales; a tied head read from embed_tokens) or mxrl "
                "(the ship bundle's keys)")
      ->check(CLI::IsMember({"mxrl", "vllm"}))
      ->capture_default_str();
  c->add_option("--previous-dump", a->previous,
                "The engine's dump before this sync: a tensor still holding those bytes is reported as not written "
                "(coverage) rather than as wrong bytes")
      ->check(CLI::ExistingFile);
  c->add_flag("--json", a->json, "JSON output");
  add_threads_option(c, &a->threads);
  c->callback([a] { run_verify(*a); });
}

}  // namespace mxrl
