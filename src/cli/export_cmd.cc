// mxrl export: a checkpoint as what a model under a recipe computes with, in a
// format another engine loads (compressed-tensors MXFP8, which vLLM reads).
#include <fmt/format.h>

#include "cli/commands.h"
#include "interop/compressed_tensors.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct CheckpointExportArgs {
  std::string model, recipe = "mxfp8", format, out;
  bool floor = false;
  int threads = 0;
};

void run_checkpoint_export(const CheckpointExportArgs& a) {
  Recipe recipe;
  recipe.plan = a.recipe, recipe.floor = a.floor;
  const PrecisionPlan plan = recipe.precision_plan();
  const Checkpoint ck = load_checkpoint(a.model);
  ThreadPool pool(a.threads);
  const Model model(ck.params, plan, {&pool});
  export_compressed_tensors(model, ck.tokenizer_json, ck.tokenizer_config_json, a.out);
  int64_t mx = 0, bf16 = 0;
  for (const PreparedLinear* L : model.linears()) (L->prec.precision == Precision::MXFP8 ? mx : bf16)++;
  fmt::print(
      "wrote {}: compressed-tensors mxfp8-quantized (plan {}): {} MXFP8 linears (F8_E4M3 + U8 scales), {} BF16 "
      "linears, embeddings and norms in BF16\n",
      a.out, plan.name, mx, bf16 - (ck.config.tie_word_embeddings ? 1 : 0));
}
}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<CheckpointExportArgs>();
  auto* c = app.add_subcommand("export", "Write what a model computes with under a recipe in another engine's format");
  c->add_option("--model", a->model, "Checkpoint directory")->required()->check(CLI::ExistingDirectory);
  c->add_option("--recipe", a->recipe, "The plan the exported weights are quantized under (mxfp8; a plan .toml)")
      ->capture_default_str();
  c->add_flag("--floor", a->floor, "MXFP8: floor scale rule instead of rceil");
  c->add_option("--format", a->format,
                "compressed-tensors: vLLM's MXFP8 layout (F8_E4M3 weights + U8 E8M0 scales per 32, BF16 "
                "embeddings/norms/router/lm_head, quantization_config format mxfp8-quantized)")
      ->required()
      ->check(CLI::IsMember({"compressed-tensors"}));
  c->add_option("--out", a->out, "Output directory (replaced atomically)")->required();
  add_threads_option(c, &a->threads);
  c->callback([a] { run_checkpoint_export(*a); });
}

}  // namespace mxrl
