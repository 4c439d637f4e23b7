#include "train/warm_start.h"

#include <algorithm>
#include <filesystem>

#include "model/checkpoint.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "train/sft.h"
#include "util/error.h"

namespace mxrl {

int64_t init_checkpoint(const std::string& out, ModelConfig cfg, uint64_t seed, float std, DType dtype) {
  const Tokenizer tk = builtin_char_tokenizer();
  if (cfg.vocab_size < tk.vocab_size())
    fail("vocab_size {} is smaller than the character tokenizer's {}", cfg.vocab_size, tk.vocab_size());
  cfg.eos_token_ids = {*tk.token_id("<|endoftext|>")};
  cfg.bos_token_id = cfg.eos_token_ids[0];
  ParamTable params(cfg);
  init_params(params, seed, std);
  save_checkpoint(out, cfg, params, dtype, {}, tk.to_json());
  return params.numel();
}

void write_preset_checkpoint(const std::string& out, const std::string& preset, uint64_t seed, float std) {
  init_checkpoint(out, preset_config(preset, builtin_char_tokenizer().vocab_size()), seed, std);
}

WarmStart warm_start(const std::string& dir, const WarmStartConfig& w,
                     const std::function<void(int64_t, double)>& on_step, const Exec& exec) {
  namespace fs = std::filesystem;
  const std::string init = (fs::path(dir) / "init").string(), sft = (fs::path(dir) / "sft").string();
  write_preset_checkpoint(init, w.preset, w.init_seed);
  SftConfig c;
  c.task = w.task;
  c.steps = w.sft_steps;
  c.batch_size = w.batch_size;
  c.seed = w.seed;
  c.eval_every = 0;
  c.eval_problems = w.eval_problems;
  c.learner.recipe.plan = w.recipe;
  c.learner.optim.lr = w.lr;
  c.learner.optim.warmup_steps = std::min<int64_t>(30, w.sft_steps / 2);
  c.learner.optim.weight_decay = 0;
  c.learner.optim.schedule = LrSchedule::Cosine;
  c.learner.optim.total_steps = w.sft_steps;
  SftRun run = SftRun::start(init, c, exec);
  SftEvents ev;
  if (on_step) ev.on_step = [&](int64_t step, const StepResult& r) { on_step(step, r.loss); };
  const EvalResult e = run.run(sft, ev);
  return {(fs::path(sft) / "final").string(), e.accuracy};
}

}  // namespace mxrl
