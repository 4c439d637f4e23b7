#include "experiments/rl_kl.h"

#include <fmt/format.h>

#include "train/grpo.h"

namespace mxrl {

std::vector<RlKlSetup> default_rl_kl_setups() {
  return {{"ship mxfp8 (on grid)", "", SyncMode::Ship},
          {"bf16 sampler", "bf16", SyncMode::Ship},
          {"mxfp8-floor (requantize)", "mxfp8-floor", SyncMode::Requantize}};
}

namespace {
double mean_after_first(const std::vector<double>& v) {
  if (v.size() < 2) return v.empty() ? 0 : v[0];
  double s = 0;
  for (size_t i = 1; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(v.size() - 1);
}
double num_or_zero(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}
}  // namespace

nlohmann::json run_rl_kl(const RlKlConfig& cfg, const std::function<void(const std::string&)>& progress,
                         const Exec& exec) {
  nlohmann::json j;
  j["config"] = {{"task", cfg.task},
                 {"recipe", cfg.recipe},
                 {"steps", cfg.steps},
                 {"prompts_per_step", cfg.prompts_per_step},
                 {"samples_per_prompt", cfg.samples_per_prompt},
                 {"lr", cfg.lr},
                 {"seeds", cfg.seeds}};
  j["runs"] = nlohmann::json::array();
  const std::vector<std::pair<std::string, std::string>> models = {{"dense", cfg.dense_model}, {"moe", cfg.moe_model}};
  for (const auto& [preset, dir] : models) {
    if (dir.empty()) continue;
    for (const RlKlSetup& s : cfg.setups)
      for (uint64_t seed : cfg.seeds) {
        RlConfig rc;
        rc.task = cfg.task;
        rc.seed = seed;
        rc.steps = cfg.steps;
        rc.prompts_per_step = cfg.prompts_per_step;
        rc.samples_per_prompt = cfg.samples_per_prompt;
        rc.sampler_plan = s.sampler;
        rc.sync = s.sync;
        rc.checks = CheckMode::Warn;
        rc.learner.recipe.plan = cfg.recipe;
        rc.learner.optim.lr = cfg.lr;
        rc.learner.optim.weight_decay = 0;
        RlRun run = RlRun::start(dir, rc, exec);
        std::vector<double> kl, reward, dmax, gen, score, train, sync_s, checks, step;
        while (run.step() < cfg.steps) {
          const RlStepStats st = run.step_once();
          kl.push_back(num_or_zero(st.mismatch, "kl_mean"));
          dmax.push_back(num_or_zero(st.mismatch, "abs_dlogp_max"));
          reward.push_back(st.reward_mean);
          gen.push_back(st.generate_s), score.push_back(st.score_s), train.push_back(st.train_s);
          sync_s.push_back(st.sync_s), checks.push_back(st.sync.check_seconds), step.push_back(st.seconds);
        }
        j["runs"].push_back({{"preset", preset},
                             {"config", s.label},
                             {"seed", seed},
                             {"kl_mean", kl},
                             {"reward", reward},
                             {"abs_dlogp_max", dmax},
                             {"time",
                              {{"generate_s", mean_after_first(gen)},
                               {"score_s", mean_after_first(score)},
                               {"train_s", mean_after_first(train)},
                               {"sync_s", mean_after_first(sync_s)},
                               {"checks_s", mean_after_first(checks)},
                               {"step_s", mean_after_first(step)}}}});
        if (progress) {
          double klm = 0;
          for (double x : kl) klm += x / static_cast<double>(kl.size());
          progress(fmt::format("{} {} seed {}: {} steps, mean KL {:.3g}, reward {:.3f} -> {:.3f}", preset, s.label,
                               seed, kl.size(), klm, reward.front(), reward.back()));
        }
      }
  }
  return j;
}

}  // namespace mxrl
