#include "experiments/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "experiments/fault_matrix.h"
#include "experiments/matching.h"
#include "experiments/rl_kl.h"
#include "experiments/train_sweep.h"
#include "model/init.h"
#include "tokenizer/tokenizer.h"
#include "train/warm_start.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/cpu.h"
#include "util/error.h"
#include "util/process.h"
#include "util/thread_pool.h"

#ifndef MXRL_REPORT_SCRIPT
#define MXRL_REPORT_SCRIPT "scripts/report.py"
#endif
#ifndef MXRL_ENGINE_PYTHON
#define MXRL_ENGINE_PYTHON "build-py/venv/bin/python"
#endif

namespace mxrl {

namespace fs = std::filesystem;
using Progress = std::function<void(const std::string&)>;

std::string default_engine_python() { return MXRL_ENGINE_PYTHON; }

std::vector<std::string> report_parts() { return {"matching", "rl-kl", "speed", "faults", "engine"}; }

namespace {
std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// "AMD EPYC ... (avx512, avx512_bf16)": the CPU model from /proc/cpuinfo and what mxrl detected.
std::string cpu_description() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(f, line))
    if (line.starts_with("model name")) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  const CpuFeatures& c = cpu_features();
  std::vector<std::string> feats;
  if (c.avx512) feats.push_back("avx512");
  if (c.avx512_bf16) feats.push_back("avx512_bf16");
  if (c.amx_bf16) feats.push_back("amx_bf16");
  return fmt::format("{} ({})", model, feats.empty() ? "no AVX-512" : fmt::format("{}", fmt::join(feats, ", ")));
}

void write_json(const std::string& dir, const std::string& name, const nlohmann::json& j) {
  write_file_atomic((fs::path(dir) / name).string(), j.dump(1) + "\n");
}

struct WarmStarts {
  std::string dense, moe;
  nlohmann::json info = nlohmann::json::object();
};

WarmStarts warm_starts(const ReportConfig& cfg, int64_t sft_steps, const Progress& progress, const Exec& exec) {
  WarmStarts w;
  for (const auto& [preset, given, slot] :
       {std::tuple{"tiny-dense", cfg.dense_model, &w.dense}, std::tuple{"tiny-moe", cfg.moe_model, &w.moe}}) {
    const std::string key = std::string(preset) == "tiny-dense" ? "dense" : "moe";
    if (!given.empty()) {
      *slot = given;
      w.info[key] = {{"model", given}, {"sft_steps", nullptr}, {"accuracy", nullptr}};
      continue;
    }
    WarmStartConfig c;
    c.preset = preset, c.task = cfg.task, c.sft_steps = sft_steps;
    const auto t0 = std::chrono::steady_clock::now();
    const WarmStart ws = warm_start((fs::path(cfg.out) / "warm" / preset).string(), c, {}, exec);
    *slot = ws.model;
    w.info[key] = {{"model", ws.model}, {"sft_steps", sft_steps}, {"accuracy", ws.accuracy}};
    progress(fmt::format("warm start {}: {} SFT steps on {}, held-out greedy accuracy {:.3f} ({:.0f} s)", preset,
                         sft_steps, cfg.task, ws.accuracy, seconds_since(t0)));
  }
  return w;
}

// Mean step-time split of a few RL steps with the learner's own plan on the sampler.
nlohmann::json rl_split(const std::string& preset, const std::string& model, const std::string& recipe, int64_t steps,
                        int64_t P, int64_t G, const std::string& task, const Exec& exec) {
  RlKlConfig c;
  c.dense_model = model;
  c.recipe = recipe;
  c.task = task;
  c.steps = steps, c.prompts_per_step = P, c.samples_per_prompt = G;
  c.seeds = {1};
  c.setups = {{"own plan", "", SyncMode::Ship}};
  const nlohmann::json r = run_rl_kl(c, {}, exec);
  nlohmann::json t = r["runs"][0]["time"];
  t["preset"] = preset, t["recipe"] = recipe, t["sampler"] = recipe, t["steps"] = steps;
  t["prompts_per_step"] = P, t["samples_per_prompt"] = G;
  return t;
}

nlohmann::json run_speed(const ReportConfig& cfg, const WarmStarts& w, const Progress& progress, const Exec& exec) {
  nlohmann::json j;
  TrainBenchConfig b;
  if (cfg.quick)
    b.tokens = 1024, b.seq_len = 64, b.budgets = {256, 512, 1024}, b.reps = 1;
  else
    b.budgets = {512, 1024, 2048, 4096, 8192, 16384};
  j["sweep"] = bench_train(
      b,
      [&](const nlohmann::json& r) {
        progress(fmt::format("sweep {} budget {}: {:.0f} tokens/s ({:.2f}x {})", r["recipe"].get<std::string>(),
                             r["budget"].get<int64_t>(), r["tokens_per_s"].get<double>(),
                             r["ratio_to_first"].get<double>(), b.recipes[0]));
      },
      exec);
  // One traced training step per recipe: Chrome trace-event JSON beside the report.
  j["traces"] = nlohmann::json::array();
  for (const char* recipe : {"bf16", "mxfp8"}) {
    TrainBenchConfig t;
    t.tokens = cfg.quick ? 1024 : 4096, t.seq_len = cfg.quick ? 64 : 128, t.budgets = {t.tokens};
    const std::string name = fmt::format("trace_{}.json", recipe);
    const std::string json = trace_train_step(t, recipe, exec);
    write_file_atomic((fs::path(cfg.out) / name).string(), json);
    nlohmann::json summary = {{"recipe", recipe}, {"file", name}, {"preset", t.preset}, {"tokens", t.tokens}};
    // Per phase: the summed span time on each thread (seconds).
    const nlohmann::json trace = nlohmann::json::parse(json);
    std::map<std::string, std::map<std::string, double>> phases;
    for (const auto& e : trace["traceEvents"])
      if (e["ph"] == "X")
        phases[e["name"].get<std::string>()][std::to_string(e["tid"].get<int>())] += e["dur"].get<double>() * 1e-6;
    summary["phases"] = phases;
    progress(fmt::format("traced one {} training step -> {}", recipe, name));
    j["traces"].push_back(std::move(summary));
  }
  j["rl_split"] = nlohmann::json::array();
  const int64_t steps = cfg.quick ? 2 : 20;
  std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> models = {{"tiny-dense", w.dense, 32, 8},
                                                                                {"tiny-moe", w.moe, 32, 8}};
  std::string qwen;
  if (!cfg.quick && cfg.qwen_shape) {
    qwen = (fs::path(cfg.out) / "warm" / "qwen3-0.6b-random").string();
    if (!fs::exists(fs::path(qwen) / "config.json"))
      init_checkpoint(qwen, shape_config("qwen3-0.6b", builtin_char_tokenizer().vocab_size()), 0, 0.02f, DType::BF16);
    models.emplace_back("qwen3-0.6b (random weights)", qwen, 2, 2);
  }
  for (const auto& [preset, model, P, G] : models) {
    if (model.empty()) continue;
    // Recipes interleaved per preset: the two figures are measured minutes apart, not a whole run.
    for (const char* recipe : {"bf16", "mxfp8"}) {
      const int64_t n = preset.starts_with("qwen") ? 3 : steps;
      nlohmann::json t = rl_split(preset, model, recipe, n, P, G, cfg.task, exec);
      progress(fmt::format("RL step {} {}: {:.3f} s (generate {:.3f}, score {:.3f}, train {:.3f}, sync {:.3f})", preset,
                           recipe, t["step_s"].get<double>(), t["generate_s"].get<double>(), t["score_s"].get<double>(),
                           t["train_s"].get<double>(), t["sync_s"].get<double>()));
      j["rl_split"].push_back(std::move(t));
    }
  }
  // The paper's speed figures beside mxrl's (mxfp8 vs bf16, same preset).
  j["paper"] = nlohmann::json::array();
  auto find = [&](const std::string& preset, const char* recipe) -> const nlohmann::json* {
    for (const auto& r : j["rl_split"])
      if (r["preset"] == preset && r["recipe"] == recipe) return &r;
    return nullptr;
  };
  const std::vector<std::tuple<const char*, const char*, std::string, const char*>> claims = {
      {"MoE RL step time", "-10.7%", "tiny-moe", "step_s"},
      {"MoE generation time", "-24%", "tiny-moe", "generate_s"},
      {"short-sequence dense RL step time", "+5%", "tiny-dense", "step_s"},
      // The Qwen3-0.6B shape runs random weights: every reward is 0, GRPO trains nothing, so only
      // generation and scoring compare.
      {"generation, Qwen3-0.6B shape (random weights)", "(not measured by the paper)", "qwen3-0.6b (random weights)",
       "generate_s"},
      {"scoring, Qwen3-0.6B shape (random weights)", "(not measured by the paper)", "qwen3-0.6b (random weights)",
       "score_s"}};
  for (const auto& [what, paper, preset, key] : claims) {
    const nlohmann::json *bf = find(preset, "bf16"), *mx = find(preset, "mxfp8");
    if (!bf || !mx) continue;
    const double a = (*bf)[key].get<double>(), c = (*mx)[key].get<double>();
    j["paper"].push_back({{"what", what},
                          {"paper", paper},
                          {"preset", preset},
                          {"metric", key},
                          {"bf16_s", a},
                          {"mxfp8_s", c},
                          {"mxrl_change_pct", a > 0 ? (c / a - 1) * 100 : 0.0}});
  }
  return j;
}
}  // namespace

namespace {
// The real-engine part: mxrl-vllm's experiment (exact KL per sampler
// configuration), its throughput bench and diverge, run by the Python that has
// vLLM and the adapter (scripts/vllm.sh installs them into build-py/venv).
void run_engine_part(const ReportConfig& cfg, const WarmStarts& w, const Progress& progress) {
  const std::string py = cfg.engine_python.empty() ? default_engine_python() : cfg.engine_python;
  if (!fs::exists(py))
    fail("report: engine part: {} is missing (run scripts/vllm.sh, or pass --engine-python)", py);
  std::vector<std::vector<std::string>> runs = {
      {py, "-m", "mxrl_vllm", "experiment", "--dense-model", w.dense, "--moe-model", w.moe, "--task", cfg.task,
       "--out", cfg.out},
      {py, "-m", "mxrl_vllm", "bench", "--out", cfg.out}};
  // diverge: where each engine first departs from the learner, one process per model.
  for (const auto& [name, dir] : {std::pair{"dense", w.dense}, std::pair{"moe", w.moe}})
    runs.push_back({py, "-m", "mxrl_vllm", "diverge", dir, "--plan", "mxfp8", "--engine", "mxrl", "--engine", "vllm",
                    "--engine", "vllm-mxrl-linear", "--engine", "vllm-mxrl", "--out",
                    (fs::path(cfg.out) / fmt::format("diverge-{}", name)).string()});
  if (cfg.quick) {
    for (const char* a : {"--seeds", "0", "--prompts", "8", "--samples", "2", "--bootstrap", "100"})
      runs[0].push_back(a);
    for (const char* a : {"--shapes", "tiny-dense", "--rounds", "1", "--new-tokens", "8"}) runs[1].push_back(a);
  } else if (!cfg.qwen_shape) {
    for (const char* a : {"--shapes", "tiny-dense,tiny-moe"}) runs[1].push_back(a);
  }
  for (const auto& argv : runs) {
    progress(fmt::format("engine: {} -m {} {}", py, argv[2], argv[3]));
    const int rc = run_program(argv);
    if (rc != 0) fail("report: engine part: {} -m {} {} failed (exit {})", py, argv[2], argv[3], rc);
  }
}
}  // namespace

void render_report(const std::string& dir, const std::string& python, const std::string& script) {
  const std::string s = script.empty() ? std::string(MXRL_REPORT_SCRIPT) : script;
  if (!fs::exists(s)) fail("report: the plotting script {} is missing (--script PATH)", s);
  const int rc = run_program({python, s, dir});
  if (rc == 127)
    fail("report: could not run {} (install python3-matplotlib, or pass --python); the JSON is in {}", python, dir);
  if (rc != 0) fail("report: {} {} failed (exit {}); the JSON is in {}", python, s, rc, dir);
}

void run_report(const ReportConfig& cfg, const Progress& progress_in, const Exec& exec) {
  const Progress progress = progress_in ? progress_in : [](const std::string&) {};
  for (const std::string& p : cfg.parts)
    if (std::find(report_parts().begin(), report_parts().end(), p) == report_parts().end())
      fail("report: unknown part '{}' (matching, rl-kl, speed, faults, engine)", p);
  auto wanted = [&](const char* p) { return std::find(cfg.parts.begin(), cfg.parts.end(), p) != cfg.parts.end(); };
  fs::create_directories(cfg.out);
  // report.json keeps each part's run (mode, date, seconds): `mxrl experiment` reruns one and keeps the rest.
  const std::string report_json = (fs::path(cfg.out) / "report.json").string();
  nlohmann::json rep = nlohmann::json::object();
  if (fs::exists(report_json)) {
    std::ifstream f(report_json);
    rep = nlohmann::json::parse(f, nullptr, false);
    if (rep.is_discarded() || !rep.is_object() || (rep.contains("parts") && !rep["parts"].is_object()))
      fail("{}: not a report.json of this version (remove it to start afresh)", report_json);
  }
  const std::string mode = cfg.quick ? "quick" : "full";
  auto timed = [&](const char* part, const std::function<void()>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    rep["parts"][part] = {{"mode", mode}, {"date", today()}, {"seconds", seconds_since(t0)}};
  };
  const int64_t sft_steps = cfg.sft_steps > 0 ? cfg.sft_steps : cfg.quick ? 30 : 800;
  WarmStarts w;
  if (cfg.dense_model.empty() || cfg.moe_model.empty())  // trained here: timed as a part of the report
    timed("warm starts", [&] { w = warm_starts(cfg, sft_steps, progress, exec); });
  else
    w = warm_starts(cfg, sft_steps, progress, exec);
  if (wanted("matching"))
    timed("matching", [&] {
      MatchingConfig m;
      m.dense_model = w.dense, m.moe_model = w.moe, m.task = cfg.task;
      if (cfg.quick) m.probe_prompts = 12, m.samples_per_prompt = 2, m.bootstrap = 200;
      nlohmann::json j = run_matching(m, progress, exec);
      j["presets"] = w.info;
      j["config"]["date"] = today();
      j["config"]["threads"] = exec.pool ? exec.pool->size() : 1;
      write_json(cfg.out, "matching.json", j);
    });
  if (wanted("rl-kl"))
    timed("rl-kl", [&] {
      RlKlConfig r;
      r.dense_model = w.dense, r.moe_model = w.moe, r.task = cfg.task;
      if (cfg.quick) r.steps = 3, r.prompts_per_step = 4, r.samples_per_prompt = 4, r.seeds = {1};
      write_json(cfg.out, "rl_kl.json", run_rl_kl(r, progress, exec));
    });
  if (wanted("speed")) timed("speed", [&] { write_json(cfg.out, "speed.json", run_speed(cfg, w, progress, exec)); });
  if (wanted("faults"))
    timed("faults", [&] {
      FaultMatrixConfig f;
      f.dense_model = w.dense;
      f.moe_model = w.moe;
      f.task = cfg.task;
      f.moe_recipe = write_router_fp32_plan((fs::path(cfg.out) / "warm").string());
      if (cfg.quick)
        f.steps = 3, f.inject_step = 2, f.prompts_per_step = 4, f.samples_per_prompt = 4,
        f.only = {"drop-tensor", "stale-scales", "stale-prefix-cache"};
      write_fault_matrix(run_fault_matrix(f, progress, exec), (fs::path(cfg.out) / "faults").string());
    });
  if (wanted("engine")) timed("engine", [&] { run_engine_part(cfg, w, progress); });
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  double total = 0;
  for (const auto& [name, p] : rep["parts"].items()) total += p.value("seconds", 0.0);
  rep["seconds"] = total;
  rep["date"] = today();
  rep["threads"] = exec.pool ? exec.pool->size() : 1;
  rep["machine"] = fmt::format("{} ({})", cpu_description(), host);
  write_json(cfg.out, "report.json", rep);
  if (cfg.render) render_report(cfg.out, cfg.python, cfg.script);
}

}  // namespace mxrl
