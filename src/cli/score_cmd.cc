// mxrl score: per-token log-probs of given sequences under a plan.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>

#include "cli/commands.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "model/score.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

namespace {
struct ScoreArgs {
  std::string model, plan = "mxfp8", in, out, engine = "sampler";
  int threads = 0;
  int64_t batch_tokens = 4096;
};

std::vector<ScoreRequest> read_requests(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open", path);
  std::vector<ScoreRequest> reqs;
  std::string line;
  for (int64_t lineno = 1; std::getline(f, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ScoreRequest r;
    try {
      const auto j = nlohmann::json::parse(line);
      if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
        fail("{}:{}: expected {{\"tokens\": [ids...], \"prompt_len\": k}}", path, lineno);
      r.tokens = j["tokens"].get<std::vector<int32_t>>();
      r.prompt_len = j.value("prompt_len", int64_t{1});
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: {}", path, lineno, e.what());
    }
    if (r.tokens.size() < 2) fail("{}:{}: a sequence needs at least 2 tokens", path, lineno);
    if (r.prompt_len < 1 || r.prompt_len >= static_cast<int64_t>(r.tokens.size()))
      fail("{}:{}: prompt_len {} must be in [1, {}]", path, lineno, r.prompt_len, r.tokens.size() - 1);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void run_score(const ScoreArgs& a) {
  PrecisionPlan plan = PrecisionPlan::resolve(a.plan);  // fail fast on a bad plan
  const auto reqs = read_requests(a.in);
  const Checkpoint ck = load_checkpoint(a.model);
  for (size_t i = 0; i < reqs.size(); ++i)
    for (int32_t t : reqs[i].tokens)
      if (t < 0 || t >= ck.config.vocab_size)
        fail("{}: sequence {} has token id {} outside the vocabulary [0, {})", a.in, i + 1, t, ck.config.vocab_size);
  ThreadPool pool(a.threads);
  std::vector<std::vector<float>> out;
  std::string plan_name = plan.name;
  auto t0 = std::chrono::steady_clock::now();
  if (a.engine == "learner") {  // the training forward pass, packed micro-batches
    LearnerConfig cfg;
    cfg.recipe.plan = a.plan;
    cfg.micro_batch_tokens = a.batch_tokens;
    Learner learner(ck.params, cfg, {&pool});
    learner.model();  // prepare the forward weights before the clock starts
    t0 = std::chrono::steady_clock::now();
    std::vector<Sequence> seqs;
    for (const auto& r : reqs) {
      Sequence s{r.tokens, std::vector<uint8_t>(r.tokens.size(), 0)};
      for (size_t t = r.prompt_len; t < r.tokens.size(); ++t) s.target[t] = 1;
      seqs.push_back(std::move(s));
    }
    out = learner.logprobs(seqs);
  } else {
    const Model model(ck.params, std::move(plan), {&pool});
    t0 = std::chrono::steady_clock::now();
    out = score_sequences(model, reqs, {a.batch_tokens, 0}, {&pool});
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text;
  int64_t tokens = 0;
  for (const auto& lp : out) {
    text += "{\"logprobs\": [";
    for (size_t t = 0; t < lp.size(); ++t) {
      if (!std::isfinite(lp[t])) fail("non-finite log-prob {} in sequence output", lp[t]);
      text += fmt::format("{}{}", t ? ", " : "", lp[t]);  // shortest repr: round-trips exactly
    }
    text += "]}\n";
  }
  for (const auto& r : reqs) tokens += static_cast<int64_t>(r.tokens.size());
  write_file_atomic(a.out, text);
  fmt::print(stderr, "scored {} sequences ({} tokens) under {} with the {} in {:.2f} s: {:.0f} tokens/s, {} thread(s)\n",
             reqs.size(), tokens, plan_name, a.engine, secs, tokens / secs, pool.size());
}
}  // namespace

void add_score_command(CLI::App& app) {
  auto a = std::make_shared<ScoreArgs>();
  auto* c = app.add_subcommand("score", "Per-token log-probs of sequences under a precision plan");
  c->add_option("--model", a->model, "Checkpoint directory (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  c->add_option("--plan", a->plan, "Precision plan: fp32, bf16, mxfp8, mxfp8-half, mxfp8-floor, fp8-block128, fp8-tensor, or a .toml file")
      ->capture_default_str();
  c->add_option("--in", a->in, "JSONL input: {\"tokens\": [ids...], \"prompt_len\": k} per line")->required()->check(CLI::ExistingFile);
  c->add_option("--out", a->out, "JSONL output: {\"logprobs\": [...]} per line, for tokens prompt_len..len-1")->required();
  c->add_option("--batch-tokens", a->batch_tokens, "Tokens per forward call (results do not depend on it)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  c->add_option("--engine", a->engine,
                "sampler (the rollout forward) or learner (the training forward); bitwise equal log-probs")
      ->check(CLI::IsMember({"sampler", "learner"}))->capture_default_str();
  add_threads_option(c, &a->threads);
  c->callback([a] { run_score(*a); });
}

}  // namespace mxrl::cli
