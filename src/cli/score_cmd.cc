// mxrl score: per-token log-probs of given sequences under a plan.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "interop/compressed_tensors.h"
#include "learner/learner.h"
#include "model/checkpoint.h"
#include "model/score.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/run_dir.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {
struct ScoreArgs {
  std::string model, plan = "mxfp8", in, out, engine = "sampler";
  int threads = 0;
  int64_t batch_tokens = 4096;
};

// Reads and validates every sequence against the model's config (token ids,
// prompt_len, length); errors name file:line (lines count from 1) and the field.
std::vector<ScoreRequest> read_requests(const std::string& path, const ModelConfig& cfg) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::vector<ScoreRequest> reqs;
  std::string line;
  for (int64_t lineno = 1; std::getline(f, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json j = json_parse(line, fmt::format("{}:{}", path, lineno));
    if (!j.is_object() || !j.contains("tokens"))
      fail("{}:{}: expected {{\"tokens\": [ids...], \"prompt_len\": k}}", path, lineno);
    ScoreRequest r;
    r.tokens = json_token_ids(j["tokens"], cfg.vocab_size, fmt::format("{}:{}: \"tokens\"", path, lineno));
    const int64_t len = static_cast<int64_t>(r.tokens.size());
    if (len < 2) fail("{}:{}: a sequence needs at least 2 tokens, got {}", path, lineno, len);
    if (len > cfg.max_position_embeddings)
      fail("{}:{}: {} tokens exceed the model's max_position_embeddings {}", path, lineno, len,
           cfg.max_position_embeddings);
    r.prompt_len = 1;  // documented default: score every token after the first
    if (j.contains("prompt_len"))
      r.prompt_len = json_integer(j["prompt_len"], 1, len - 1, fmt::format("{}:{}: \"prompt_len\"", path, lineno));
    reqs.push_back(std::move(r));
  }
  if (f.bad()) fail("{}: read error", path);
  return reqs;
}

void run_score(const ScoreArgs& a) {
  make_parent_dirs(a.out);
  PrecisionPlan plan = PrecisionPlan::resolve(a.plan);  // fail fast on a bad plan
  // The config first (cheap), so that a bad input line fails before the weights load.
  const auto reqs = read_requests(a.in, load_model_config(a.model));
  if (a.engine == "learner" && is_compressed_tensors(a.model))
    fail(
        "{}: --engine learner needs a plain checkpoint (FP32/BF16 masters); a compressed-tensors model scores with "
        "--engine sampler",
        a.model);
  ThreadPool pool(a.threads);
  std::vector<std::vector<float>> out;
  std::string plan_name = plan.name;
  auto t0 = std::chrono::steady_clock::now();
  if (a.engine == "learner") {  // the training forward pass, packed micro-batches
    LearnerConfig cfg;
    cfg.recipe.plan = a.plan;
    cfg.micro_batch_tokens = a.batch_tokens;
    Learner learner(load_checkpoint(a.model).params, cfg, {&pool});
    learner.model();  // prepare the forward weights before the clock starts
    t0 = std::chrono::steady_clock::now();
    std::vector<Sequence> seqs;
    for (const auto& r : reqs) {
      Sequence s{r.tokens, std::vector<uint8_t>(r.tokens.size(), 0), {}};
      for (size_t t = r.prompt_len; t < r.tokens.size(); ++t) s.target[t] = 1;
      seqs.push_back(std::move(s));
    }
    out = learner.logprobs(seqs);
  } else {
    const Model model = load_model(a.model, plan, {&pool});
    t0 = std::chrono::steady_clock::now();
    out = score_sequences(model, reqs, {a.batch_tokens, 0}, {&pool});
  }
  const double secs = seconds_since(t0);
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
  fmt::print(stderr,
             "scored {} sequences ({} tokens) under {} with the {} in {:.2f} s: {:.0f} tokens/s, {} thread(s)\n",
             reqs.size(), tokens, plan_name, a.engine, secs, tokens / secs, pool.size());
}
}  // namespace

void add_score_command(CLI::App& app) {
  auto a = std::make_shared<ScoreArgs>();
  auto* c = app.add_subcommand("score", "Per-token log-probs of sequences under a precision plan");
  c->add_option("--model", a->model,
                "Checkpoint directory (config.json + safetensors), or a compressed-tensors MXFP8 export")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("--plan", a->plan,
                "Precision plan: fp32, bf16, mxfp8, mxfp8-half, mxfp8-floor, fp8-block128, fp8-tensor, or a .toml file")
      ->capture_default_str();
  c->add_option("--in", a->in, "JSONL input: {\"tokens\": [ids...], \"prompt_len\": k} per line")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--out", a->out, "JSONL output: {\"logprobs\": [...]} per line, for tokens prompt_len..len-1")
      ->required();
  c->add_option("--batch-tokens", a->batch_tokens, "Tokens per forward call (results do not depend on it)")
      ->check(at_least(1))
      ->capture_default_str();
  c->add_option("--engine", a->engine,
                "sampler (the rollout forward) or learner (the training forward); bitwise equal log-probs")
      ->check(CLI::IsMember({"sampler", "learner"}))
      ->capture_default_str();
  add_threads_option(c, &a->threads);
  c->callback([a] { run_score(*a); });
}

}  // namespace mxrl
