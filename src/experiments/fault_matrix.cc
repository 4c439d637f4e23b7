#include "experiments/fault_matrix.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "faults/hooks.h"
#include "model/checkpoint.h"
#include "sync/checks.h"
#include "train/grpo.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace mxrl {

namespace {
using json = nlohmann::json;

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double max_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

RunTrace run_one(const std::string& model, RlConfig cfg, int64_t inject_step, const Exec& exec) {
  RunTrace t;
  RlEvents ev;
  ev.on_step = [&](const RlStepStats& s) {
    const double kl = s.mismatch.value("kl_mean", 0.0), dl = s.mismatch.value("abs_dlogp_max", 0.0);
    if (!std::isfinite(s.reward_mean) || !std::isfinite(kl) || !std::isfinite(dl) || !std::isfinite(s.grad_norm))
      t.nan = true;
    if (s.step <= inject_step) return;  // generated before the sync that carries the fault
    t.reward.push_back(s.reward_mean);
    t.kl_mean.push_back(kl);
    t.abs_dlogp_max.push_back(dl);
  };
  ev.on_sync = [&](const SyncReport& r) {
    if (!r.error.empty()) t.sync_errors.push_back(fmt::format("v{}: {}", r.version, r.error));
    for (const CheckResult& c : r.checks)
      if (c.ran && !c.passed && !t.first_fired.count(c.name)) {
        t.first_fired[c.name] = static_cast<int64_t>(r.version);
        t.first_finding[c.name] = c.findings.empty() ? "" : c.findings.front();
      }
  };
  try {
    RlRun run = RlRun::start(model, cfg, exec);
    // start() made the first sync already (version 0): it is clean by construction.
    while (run.step() < cfg.steps) {
      const RlStepStats s = run.step_once(ev);
      ev.on_step(s);
    }
  } catch (const std::exception& e) {
    t.crashed = true;
    t.error = e.what();
  }
  return t;
}

std::string md_escape(std::string s) {
  for (char& c : s)
    if (c == '|') c = '/';
  return s;
}
}  // namespace

json FaultRow::to_json() const {
  json j = {{"preset", preset},       {"fault", fault},
            {"condition", condition}, {"condition_name", condition_name(condition)},
            {"seam", seam},           {"applicable", applicable}};
  if (!applicable) {
    j["skipped"] = skipped;
    return j;
  }
  j["fired"] = fired;
  j["findings"] = findings;
  j["missed"] = missed;
  j["first_opportunity"] = first_opportunity;
  j["silent_without_checks"] = silent;
  j["visible_without_checks"] = visible;
  j["kl_mean"] = {{"fault", kl_fault}, {"clean", kl_clean}};
  j["abs_dlogp_max"] = {{"fault", dlogp_fault}, {"clean", dlogp_clean}};
  j["reward_mean"] = {{"fault", reward_fault}, {"clean", reward_clean}};
  // Per step after the injection (checks off), fault and clean.
  j["per_step"] = {{"kl_mean", {{"fault", fault_trace.kl_mean}, {"clean", clean_trace.kl_mean}}},
                   {"abs_dlogp_max", {{"fault", fault_trace.abs_dlogp_max}, {"clean", clean_trace.abs_dlogp_max}}},
                   {"reward", {{"fault", fault_trace.reward}, {"clean", clean_trace.reward}}}};
  return j;
}

json FaultMatrix::to_json() const {
  json rs = json::array();
  for (const FaultRow& r : rows) rs.push_back(r.to_json());
  return {{"config",
           {{"dense_model", cfg.dense_model},
            {"moe_model", cfg.moe_model},
            {"dense_recipe", cfg.dense_recipe},
            {"moe_recipe", cfg.moe_recipe},
            {"task", cfg.task},
            {"steps", cfg.steps},
            {"inject_step", cfg.inject_step},
            {"prompts_per_step", cfg.prompts_per_step},
            {"samples_per_prompt", cfg.samples_per_prompt},
            {"lr", cfg.lr},
            {"seed", cfg.seed},
            {"visible_drop", cfg.visible_drop}}},
          {"rows", rs}};
}

std::string FaultMatrix::to_markdown() const {
  std::string out = fmt::format(
      "# Sync fault matrix\n\n"
      "{} steps of GRPO ({} prompts x {} samples, lr {}) on `{}` from SFT warm starts; each fault injected from the "
      "sync of version {} (the first opportunity). Checks on (`--checks warn`): the checks that fired, with the "
      "version offset from the injection (+0 = first opportunity). Checks off: silent means no error, no NaN and no "
      "reward drop over {} against the clean run of the same seed. KL: mean exact KL(rollout || learner) per token "
      "over the rollouts generated after the injection, fault / clean.\n\n",
      cfg.steps, cfg.prompts_per_step, cfg.samples_per_prompt, cfg.lr, cfg.task, cfg.inject_step, cfg.visible_drop);
  out +=
      "| preset | fault | condition | seam | fired (offset) | missed | first opp. | silent w/o checks | KL fault / "
      "clean "
      "| max abs dlogp | reward fault / clean |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  int64_t run = 0, silent = 0, first = 0, caught = 0;
  std::vector<std::string> uncaught;
  for (const FaultRow& r : rows) {
    if (!r.applicable) continue;
    ++run;
    silent += r.silent;
    first += r.first_opportunity;
    caught += !r.fired.empty();
    if (r.fired.empty()) uncaught.push_back(r.preset + " " + r.fault);
    std::vector<std::string> f;
    for (const auto& [c, off] : r.fired) f.push_back(fmt::format("{} (+{})", c, off));
    out += fmt::format("| {} | {} | {} {} | {} | {} | {} | {} | {} | {:.3g} / {:.3g} | {:.3g} | {:.3f} / {:.3f} |\n",
                       r.preset, r.fault, r.condition, condition_name(r.condition), r.seam,
                       f.empty() ? "none" : fmt::format("{}", fmt::join(f, ", ")),
                       r.missed.empty() ? "-" : fmt::format("{}", fmt::join(r.missed, ", ")),
                       r.first_opportunity ? "yes" : "no", r.silent ? "yes" : md_escape("no: " + r.visible), r.kl_fault,
                       r.kl_clean, r.dlogp_fault, r.reward_fault, r.reward_clean);
  }
  out += fmt::format(
      "\n{} fault runs: {} silent without checks, {} caught at the first opportunity, {} caught at all{}.\n", run,
      silent, first, caught, uncaught.empty() ? "" : fmt::format(" (not caught: {})", fmt::join(uncaught, ", ")));
  std::vector<std::string> skipped;
  for (const FaultRow& r : rows)
    if (!r.applicable) skipped.push_back(fmt::format("{} {} ({})", r.preset, r.fault, r.skipped));
  if (!skipped.empty()) out += fmt::format("\nNot applicable: {}.\n", fmt::join(skipped, "; "));
  out +=
      "\nThe paper behind this project met 7 weight-sync failures on real hardware; 5 were silent, and each was "
      "caught at the first opportunity by a check that the others missed.\n";
  out += "\nFirst finding of each check that fired:\n\n";
  for (const FaultRow& r : rows)
    for (const auto& [c, f] : r.findings) out += fmt::format("- {} {} / {}: {}\n", r.preset, r.fault, c, md_escape(f));
  return out;
}

FaultMatrix run_fault_matrix(const FaultMatrixConfig& mc, const std::function<void(const std::string&)>& progress,
                             const Exec& exec) {
  if (mc.inject_step < 1 || mc.inject_step >= mc.steps)
    fail("faults: the injection step must be in [1, steps), got {} with {} steps", mc.inject_step, mc.steps);
  for (const std::string& n : mc.only) FaultPlan::parse({n});  // unknown names refused up front
  FaultMatrix m;
  m.cfg = mc;
  struct Preset {
    std::string name, model, recipe;
  };
  std::vector<Preset> presets;
  if (!mc.dense_model.empty()) presets.push_back({"dense", mc.dense_model, mc.dense_recipe});
  if (!mc.moe_model.empty()) presets.push_back({"moe", mc.moe_model, mc.moe_recipe});
  for (const Preset& p : presets) {
    const ModelConfig mcfg = load_checkpoint(p.model).params.config();
    const PrecisionPlan plan = PrecisionPlan::resolve(p.recipe);
    // Faults of an FP8 KV cache run against a sampler that has one (the learner has none).
    const std::string kv_plan = p.recipe.size() > 5 && p.recipe.substr(p.recipe.size() - 5) == ".toml"
                                    ? p.recipe.substr(0, p.recipe.size() - 5) + "-fp8kv.toml"
                                    : p.recipe + "+fp8kv";
    std::map<std::pair<SyncMode, bool>, RunTrace> clean;
    auto base = [&](SyncMode mode, bool fp8kv) {
      RlConfig c;
      c.task = mc.task;
      c.seed = mc.seed;
      c.steps = mc.steps;
      c.prompts_per_step = mc.prompts_per_step;
      c.samples_per_prompt = mc.samples_per_prompt;
      c.eval_problems = 0;
      c.sync = mode;
      c.checks = CheckMode::Warn;
      c.learner.recipe.plan = p.recipe;
      if (fp8kv) c.sampler_plan = kv_plan;
      c.learner.optim.lr = mc.lr;
      c.learner.optim.weight_decay = 0;
      return c;
    };
    for (const FaultInfo& f : fault_table()) {
      if (!mc.only.empty() && std::find(mc.only.begin(), mc.only.end(), f.name) == mc.only.end()) continue;
      FaultRow row;
      row.preset = p.name;
      row.fault = f.name;
      row.condition = f.condition;
      row.seam = seam_name(f.seam);
      const SyncMode mode = f.needs_requantize ? SyncMode::Requantize : SyncMode::Ship;
      const auto key = std::make_pair(mode, f.needs_fp8_kv);
      FaultPlan fp;
      fp.add(f.fault, static_cast<uint64_t>(mc.inject_step));
      try {
        check_faults_apply(fp, mcfg, plan, f.needs_fp8_kv ? PrecisionPlan::resolve(kv_plan) : plan, mode);
      } catch (const Error& e) {
        row.applicable = false;
        row.skipped = e.what();
        m.rows.push_back(row);
        continue;
      }
      if (!clean.count(key)) {
        if (progress)
          progress(fmt::format("{}: clean run ({}{})", p.name, sync_mode_name(mode),
                               f.needs_fp8_kv ? ", FP8 KV sampler" : ""));
        clean[key] = run_one(p.model, base(mode, f.needs_fp8_kv), mc.inject_step, exec);
        const RunTrace& c = clean[key];
        if (c.crashed) fail("faults: the clean {} run failed: {}", p.name, c.error);
        if (!c.first_fired.empty())
          fail("faults: the clean {} run fired {} at version {}: {}", p.name, c.first_fired.begin()->first,
               c.first_fired.begin()->second, c.first_finding.begin()->second);
      }
      const RunTrace& c = clean[key];
      RlConfig on = base(mode, f.needs_fp8_kv);
      on.inject = fp.specs();
      if (progress) progress(fmt::format("{}: {} (checks on)", p.name, f.name));
      const RunTrace warn = run_one(p.model, on, mc.inject_step, exec);
      RlConfig off = on;
      off.checks = CheckMode::Off;
      if (progress) progress(fmt::format("{}: {} (checks off)", p.name, f.name));
      const RunTrace quiet = run_one(p.model, off, mc.inject_step, exec);
      for (const auto& [check, v] : warn.first_fired) {
        row.fired[check] = v - mc.inject_step;
        row.findings[check] = warn.first_finding.at(check);
        if (v == mc.inject_step) row.first_opportunity = true;
      }
      for (const std::string& check : check_names())
        if (!warn.first_fired.count(check)) row.missed.push_back(check);
      row.kl_fault = mean(quiet.kl_mean), row.kl_clean = mean(c.kl_mean);
      row.dlogp_fault = max_of(quiet.abs_dlogp_max), row.dlogp_clean = max_of(c.abs_dlogp_max);
      row.reward_fault = mean(quiet.reward), row.reward_clean = mean(c.reward);
      row.fault_trace = quiet, row.clean_trace = c;
      std::vector<std::string> shows;
      if (quiet.crashed) shows.push_back("the run ended: " + quiet.error);
      if (!quiet.sync_errors.empty()) shows.push_back("sync error " + quiet.sync_errors.front());
      if (quiet.nan) shows.push_back("NaN");
      if (row.reward_fault < row.reward_clean - mc.visible_drop)
        shows.push_back(fmt::format("reward {:.3f} vs {:.3f}", row.reward_fault, row.reward_clean));
      row.silent = shows.empty();
      row.visible = fmt::format("{}", fmt::join(shows, "; "));
      m.rows.push_back(row);
    }
  }
  return m;
}

std::string write_router_fp32_plan(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string r32 = (fs::path(dir) / "mxfp8-router-fp32.toml").string();
  write_file_atomic(r32, "name = \"mxfp8-router-fp32\"\ndefault = \"mxfp8\"\nrouter = \"fp32\"\n");
  write_file_atomic((fs::path(dir) / "mxfp8-router-fp32-fp8kv.toml").string(),
                    "name = \"mxfp8-router-fp32+fp8kv\"\ndefault = \"mxfp8\"\nrouter = \"fp32\"\nkv_cache = \"fp8\"\n");
  return r32;
}

void write_fault_matrix(const FaultMatrix& m, const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_file_atomic((std::filesystem::path(dir) / "faults.json").string(), m.to_json().dump(2) + "\n");
  write_file_atomic((std::filesystem::path(dir) / "faults.md").string(), m.to_markdown());
}

}  // namespace mxrl
