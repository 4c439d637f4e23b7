#include "sampler/generate.h"

#include <fmt/format.h>

#include <algorithm>

#include "sampler/prompts.h"
#include "util/error.h"

namespace mxrl {

std::vector<int32_t> generation_stop_tokens(const ModelConfig& cfg, bool defaults, const std::vector<int64_t>& extra,
                                            const std::string& what) {
  std::vector<int32_t> stop;
  if (defaults) stop = default_stop_tokens(cfg);
  for (int64_t id : extra) {
    if (id < 0 || id >= cfg.vocab_size)
      fail("{} {}: unknown token id, outside the model's vocabulary [0, {})", what, id, cfg.vocab_size);
    stop.push_back(static_cast<int32_t>(id));
  }
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());
  return stop;
}

std::vector<GeneratedSample> generate(std::shared_ptr<const Model> model,
                                      const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
                                      const Exec& exec, const std::function<std::string(size_t)>& prompt_label,
                                      const std::function<void(const GenerateProgress&)>& on_step) {
  const ModelConfig& cfg = model->config();
  o.sampling.validate();
  if (o.n < 1) fail("n must be >= 1, got {}", o.n);
  if (o.max_new_tokens < 1) fail("{} must be >= 1, got {}", o.max_new_tokens_name, o.max_new_tokens);
  EngineOptions eo;
  eo.kv_budget_tokens = o.kv_budget;
  eo.prefix_sharing = o.prefix_sharing;
  eo.record_logits = o.record_logits;
  eo.max_prefill_tokens = std::max(eo.max_prefill_tokens, cfg.max_position_embeddings);  // any valid prompt fits
  Engine engine(std::move(model), /*version=*/0, eo, exec);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].size());
    if (len < 1) fail("{}: an empty prompt", prompt_label(i));
    for (size_t t = 0; t < prompts[i].size(); ++t)
      if (prompts[i][t] < 0 || prompts[i][t] >= cfg.vocab_size)
        fail("{}[{}]: token id {} is outside the model's vocabulary [0, {})", prompt_label(i), t, prompts[i][t],
             cfg.vocab_size);
    const int64_t need = std::min(len + o.max_new_tokens, cfg.max_position_embeddings);
    if (need > o.kv_budget)
      fail("{}: a sample of this prompt ({} tokens) with {} {} needs {} KV cache positions, more than {} {}",
           prompt_label(i), len, o.max_new_tokens_name, o.max_new_tokens, need, o.kv_budget_name, o.kv_budget);
    GenerationRequest r;
    r.id = static_cast<int64_t>(i);
    r.prompt = prompts[i];
    r.n = o.n;
    r.max_new_tokens = o.max_new_tokens;
    r.sampling = o.sampling;
    r.stop_tokens = o.stop_tokens;
    r.seed = o.seed;
    try {
      engine.submit(r);
    } catch (const Error& e) {
      fail("{}: {}", prompt_label(i), e.what());
    }
  }

  GenerateProgress progress;
  progress.total = static_cast<int64_t>(prompts.size()) * o.n;
  std::vector<GeneratedSample> samples;
  samples.reserve(static_cast<size_t>(progress.total));
  if (on_step) on_step(progress);
  while (!engine.idle()) {
    std::vector<GeneratedSample> done = engine.step();
    progress.tokens += engine.running() + static_cast<int64_t>(done.size());  // one token per sample in the step
    for (auto& s : done) samples.push_back(std::move(s));
    progress.samples = static_cast<int64_t>(samples.size());
    if (on_step) on_step(progress);
  }
  if (static_cast<int64_t>(samples.size()) != progress.total)
    fail("internal: the engine returned {} samples, expected {}", samples.size(), progress.total);
  std::sort(samples.begin(), samples.end(), [](const GeneratedSample& x, const GeneratedSample& y) {
    return x.request != y.request ? x.request < y.request : x.index < y.index;
  });
  return samples;
}

}  // namespace mxrl
