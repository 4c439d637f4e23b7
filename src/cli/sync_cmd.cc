// mxrl sync export / inspect: weight-sync bundles (sync/bundle.h) written
// from a checkpoint as a learner would, and verified and listed.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "cli/commands.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "sync/bundle.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
struct ExportArgs {
  std::string model, recipe = "mxfp8", sync, sampler_plan, out;
  bool floor = false, hybrid = false;
  uint64_t version = 0;
  int threads = 0;
};

struct InspectArgs {
  std::string bundle;
  bool json = false;
};

void run_export(const ExportArgs& a) {
  const sync::SyncMode mode = sync::parse_sync_mode(a.sync);
  Recipe recipe;
  recipe.plan = a.recipe, recipe.hybrid = a.hybrid, recipe.floor = a.floor;
  const PrecisionPlan learner_plan = recipe.precision_plan();
  if (mode == sync::SyncMode::Requantize && !a.sampler_plan.empty())
    fail("--sampler-plan applies only with --sync ship (a requantize bundle is for any sampler plan)");
  const PrecisionPlan sampler_plan = a.sampler_plan.empty() ? learner_plan : PrecisionPlan::resolve(a.sampler_plan);
  if (mode == sync::SyncMode::Ship)  // before loading the weights
    sync::check_ship_compatible(learner_plan, sampler_plan, ModelConfig::load(a.model + "/config.json"));
  const Checkpoint ck = load_checkpoint(a.model);
  ThreadPool pool(a.threads);
  sync::Bundle b;
  if (mode == sync::SyncMode::Ship) {
    const Model learner(ck.params, learner_plan, {&pool});
    b = sync::make_ship_bundle(learner, ck.params, sampler_plan, a.version, {&pool});
  } else {
    b = sync::make_requantize_bundle(ck.params, learner_plan, a.version);
  }
  sync::write_bundle(b, a.out);
  int64_t bytes = 0;
  for (const TensorDigest& d : b.manifest) bytes += d.bytes;
  fmt::print("wrote {}: {} bundle v{}, recipe {}, plan {}, {} tensors, {} payload bytes\n", a.out,
             sync::sync_mode_name(b.mode), b.version, b.recipe, b.plan, b.manifest.size(), bytes);
}

void run_inspect(const InspectArgs& a) {
  const sync::Bundle b = sync::read_bundle(a.bundle);
  if (a.json) {
    const nlohmann::json j = {{"format", sync::kBundleFormat}, {"version", b.version},
                              {"sync", sync::sync_mode_name(b.mode)}, {"recipe", b.recipe},
                              {"plan", b.plan}, {"config", b.config},
                              {"manifest", digests_to_json(b.manifest)}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  int64_t bytes = 0;
  for (const TensorDigest& d : b.manifest) bytes += d.bytes;
  fmt::print("{}: {} v{}, {} bundle, recipe {}, plan {}, {} tensors, {} payload bytes (verified)\n", a.bundle,
             sync::kBundleFormat, b.version, sync::sync_mode_name(b.mode), b.recipe, b.plan, b.manifest.size(), bytes);
  for (const TensorDigest& d : b.manifest)
    fmt::print("{} {} {} [{}] {} {} {:016x}\n", d.name, d.part, d.dtype, fmt::join(d.shape, ", "), d.precision,
               d.bytes, d.xxh3);
}
}  // namespace

void add_sync_command(CLI::App& app) {
  auto* s = app.add_subcommand("sync", "Weight-sync bundles: export from a checkpoint, inspect and verify");
  s->require_subcommand(1);

  auto e = std::make_shared<ExportArgs>();
  auto* ex = s->add_subcommand("export", "Write the bundle a learner under a recipe would send for weight version N");
  ex->add_option("--model", e->model, "Checkpoint directory (the learner's weights)")
      ->required()->check(CLI::ExistingDirectory);
  ex->add_option("--recipe", e->recipe, "The learner's plan: bf16, mxfp8 (or fp32, mxfp8-half, a plan .toml)")
      ->capture_default_str();
  ex->add_flag("--floor", e->floor, "MXFP8: floor scale rule instead of rceil");
  ex->add_flag("--hybrid", e->hybrid, "MXFP8: E5M2 gradients (does not change the forward weights)");
  ex->add_option("--sync", e->sync, "ship (the learner's own weights) or requantize (BF16 copies)")
      ->required()->check(CLI::IsMember({"ship", "requantize"}));
  ex->add_option("--sampler-plan", e->sampler_plan, "ship: the sampler's plan (default: the recipe's)");
  ex->add_option("--version", e->version, "Weight version")->capture_default_str();
  ex->add_option("--out", e->out, "Output bundle (.safetensors)")->required();
  add_threads_option(ex, &e->threads);
  ex->callback([e] { run_export(*e); });

  auto i = std::make_shared<InspectArgs>();
  auto* in = s->add_subcommand("inspect", "Verify a bundle and list its header and manifest");
  in->add_option("BUNDLE", i->bundle, "Bundle (.safetensors)")->required();
  in->add_flag("--json", i->json, "JSON output");
  in->callback([i] { run_inspect(*i); });
}

}  // namespace mxrl::cli
