// mxrl sync export / inspect: weight-sync bundles (sync/bundle.h) written
// from a checkpoint as a learner would, and verified and listed.
// mxrl sync dump: the sampler's weights after one real sync (optionally with
// a condition 1-4 fault injected), dumped as an engine would (interop/engine_dump.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include "cli/commands.h"
#include "faults/hooks.h"
#include "interop/engine_dump.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "sync/bundle.h"
#include "sync/sync.h"
#include "util/error.h"
#include "util/run_dir.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct ExportArgs {
  std::string model, recipe = "mxfp8", sync, sampler_plan, out;
  bool floor = false, hybrid = false;
  uint64_t version = 0;
  int threads = 0;
};

struct DumpArgs {
  std::string model, previous_model, recipe = "mxfp8", sync = "ship", naming = "vllm", fault, out, previous_out;
  bool floor = false, hybrid = false;
  int threads = 0;
};

struct InspectArgs {
  std::string bundle;
  bool json = false;
};

void run_export(const ExportArgs& a) {
  make_parent_dirs(a.out);
  const SyncMode mode = parse_sync_mode(a.sync);
  Recipe recipe;
  recipe.plan = a.recipe, recipe.hybrid = a.hybrid, recipe.floor = a.floor;
  const PrecisionPlan learner_plan = recipe.precision_plan();
  if (mode == SyncMode::Requantize && !a.sampler_plan.empty())
    fail("--sampler-plan applies only with --sync ship (a requantize bundle is for any sampler plan)");
  const PrecisionPlan sampler_plan = a.sampler_plan.empty() ? learner_plan : PrecisionPlan::resolve(a.sampler_plan);
  if (mode == SyncMode::Ship)  // before loading the weights
    check_ship_compatible(learner_plan, sampler_plan, ModelConfig::load(a.model + "/config.json"));
  const Checkpoint ck = load_checkpoint(a.model);
  ThreadPool pool(a.threads);
  const Bundle b = export_bundle(ck.params, learner_plan, mode, sampler_plan, a.version, {&pool});
  write_bundle(b, a.out);
  int64_t bytes = 0;
  for (const TensorDigest& d : b.manifest) bytes += d.bytes;
  fmt::print("wrote {}: {} bundle v{}, recipe {}, plan {}, {} tensors, {} payload bytes\n", a.out,
             sync_mode_name(b.mode), b.version, b.recipe, b.plan, b.manifest.size(), bytes);
}

// The names of the faults a weight dump can show (conditions 1-4).
std::vector<std::string> dump_fault_names() {
  std::vector<std::string> out;
  for (const FaultInfo& f : fault_table())
    if (f.condition <= 4) out.push_back(f.name);
  return out;
}

void run_dump(const DumpArgs& a) {
  make_parent_dirs(a.out);
  if (!a.previous_out.empty()) make_parent_dirs(a.previous_out);
  const SyncMode mode = parse_sync_mode(a.sync);
  const Naming naming = parse_naming(a.naming);
  Recipe recipe;
  recipe.plan = a.recipe, recipe.hybrid = a.hybrid, recipe.floor = a.floor;
  const PrecisionPlan plan = recipe.precision_plan();
  const ModelConfig cfg = ModelConfig::load(a.model + "/config.json");
  SyncSettings s;
  s.mode = mode;
  s.checks = CheckMode::Warn;
  s.agreement_every = 0;  // conditions 1-4 are what a dump shows
  const FaultPlan faults = a.fault.empty() ? FaultPlan{} : FaultPlan::parse({a.fault});
  check_faults_apply(faults, cfg, plan, plan, mode);
  s.hooks = make_fault_hooks(faults).sync;
  const Checkpoint ck = load_checkpoint(a.model);
  ThreadPool pool(a.threads);
  const Exec exec{&pool};
  // The sampler serves version 0 (the previous checkpoint, else this one) and receives version 1.
  const ParamTable before = a.previous_model.empty() ? ck.params : load_checkpoint(a.previous_model).params;
  Engine engine(std::make_shared<const Model>(before, plan, exec), 0, {}, exec);
  if (!a.previous_out.empty()) write_dump(engine.model(), naming, a.previous_out);
  const Model learner(ck.params, plan, exec);
  Probe probe;
  probe.tokens = {{0, 1}};
  probe.prompt_len = {1};
  const SyncReport r = sync_weights(learner, ck.params, engine, 1, s, probe, {}, 0, {}, exec);
  if (!r.applied) fail("sync dump: the sampler refused version 1: {}", r.error);
  write_dump(engine.model(), naming, a.out);
  std::vector<std::string> failed;
  for (const CheckResult& c : r.checks)
    if (c.ran && !c.passed) failed.push_back(c.name);
  fmt::print("wrote {}: {} dump of the sampler after {} sync v1 (recipe {}){}; the in-process checks {}\n", a.out,
             naming_name(naming), sync_mode_name(mode), plan.name,
             a.fault.empty() ? "" : fmt::format(", fault {}", a.fault),
             failed.empty() ? std::string("passed") : fmt::format("failed {}", fmt::join(failed, ", ")));
}

void run_inspect(const InspectArgs& a) {
  const Bundle b = read_bundle(a.bundle);
  if (a.json) {
    fmt::print("{}\n", bundle_summary(b).dump(2));
    return;
  }
  int64_t bytes = 0;
  for (const TensorDigest& d : b.manifest) bytes += d.bytes;
  fmt::print("{}: {} v{}, {} bundle, recipe {}, plan {}, {} tensors, {} payload bytes (verified)\n", a.bundle,
             kBundleFormat, b.version, sync_mode_name(b.mode), b.recipe, b.plan, b.manifest.size(), bytes);
  for (const TensorDigest& d : b.manifest)
    fmt::print("{} {} {} [{}] {} {} {:016x}\n", d.name, d.part, d.dtype, fmt::join(d.shape, ", "), d.precision, d.bytes,
               d.xxh3);
}
}  // namespace

void add_sync_command(CLI::App& app) {
  auto* s = app.add_subcommand(
      "sync", "Weight-sync bundles: export from a checkpoint, inspect and verify; dump a synced sampler's weights");
  s->require_subcommand(1);

  auto e = std::make_shared<ExportArgs>();
  auto* ex = s->add_subcommand("export", "Write the bundle a learner under a recipe would send for weight version N");
  ex->add_option("--model", e->model, "Checkpoint directory (the learner's weights)")
      ->required()
      ->check(CLI::ExistingDirectory);
  ex->add_option("--recipe", e->recipe, "The learner's plan: bf16, mxfp8 (or fp32, mxfp8-half, a plan .toml)")
      ->capture_default_str();
  ex->add_flag("--floor", e->floor, "MXFP8: floor scale rule instead of rceil");
  ex->add_flag("--hybrid", e->hybrid, "MXFP8: E5M2 gradients (does not change the forward weights)");
  ex->add_option("--sync", e->sync, "ship (the learner's own weights) or requantize (BF16 copies)")
      ->required()
      ->check(CLI::IsMember({"ship", "requantize"}));
  ex->add_option("--sampler-plan", e->sampler_plan, "ship: the sampler's plan (default: the recipe's)");
  ex->add_option("--version", e->version, "Weight version")->capture_default_str();
  ex->add_option("--out", e->out, "Output bundle (.safetensors)")->required();
  add_threads_option(ex, &e->threads);
  ex->callback([e] { run_export(*e); });

  auto d = std::make_shared<DumpArgs>();
  auto* du = s->add_subcommand("dump",
                               "Run one sync of a checkpoint into a sampler (optionally with a fault) and write the "
                               "sampler's weights as an engine's dump, for mxrl verify-sync");
  du->add_option("--model", d->model, "Checkpoint directory (the learner's weights, version 1)")
      ->required()
      ->check(CLI::ExistingDirectory);
  du->add_option("--previous-model", d->previous_model,
                 "Checkpoint the sampler serves before the sync (version 0; default: --model). Faults that leave "
                 "tensors stale (drop-tensor, drop-experts, stale-tied-head, stale-scales) show only when it differs")
      ->check(CLI::ExistingDirectory);
  du->add_option("--recipe", d->recipe, "The learner's plan, which the sampler runs (mxfp8, bf16, a plan .toml)")
      ->capture_default_str();
  du->add_flag("--floor", d->floor, "MXFP8: floor scale rule instead of rceil");
  du->add_flag("--hybrid", d->hybrid, "MXFP8: E5M2 gradients (does not change the forward weights)");
  du->add_option("--sync", d->sync, "ship or requantize")
      ->check(CLI::IsMember({"ship", "requantize"}))
      ->capture_default_str();
  du->add_option("--naming", d->naming, "Dump layout: vllm or mxrl")
      ->check(CLI::IsMember({"mxrl", "vllm"}))
      ->capture_default_str();
  du->add_option("--fault", d->fault, "Inject one condition 1-4 sync fault (see mxrl faults)")
      ->check(CLI::IsMember(dump_fault_names()));
  du->add_option("--out", d->out, "Output dump (.safetensors)")->required();
  du->add_option("--previous-out", d->previous_out,
                 "Also dump the sampler before the sync (verify-sync --previous-dump)");
  add_threads_option(du, &d->threads);
  du->callback([d] { run_dump(*d); });

  auto i = std::make_shared<InspectArgs>();
  auto* in = s->add_subcommand("inspect", "Verify a bundle and list its header and manifest");
  in->add_option("BUNDLE", i->bundle, "Bundle (.safetensors)")->required();
  in->add_flag("--json", i->json, "JSON output");
  in->callback([i] { run_inspect(*i); });
}

}  // namespace mxrl
