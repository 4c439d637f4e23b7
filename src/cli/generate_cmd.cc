// mxrl generate: samples from a checkpoint under a precision plan, through
// the rollout engine (sampler/engine.h).
//
//   prompts.jsonl: {"prompt": "text"} (tokenized with the checkpoint's
//                  tokenizer.json) or {"tokens": [ids...]} per line; blank
//                  lines skipped; other keys ignored.
//   samples.jsonl: one line per sample, ordered by (prompt index, sample index):
//                  {"prompt_index": i, "sample_index": j, "tokens": [...],
//                   "text": "...", "logprobs": [...], "finish_reason": "stop",
//                   "version": v}
// Prompt i (its index among the non-blank lines) is request id i, so its
// samples depend only on (seed, i, its tokens and the parameters), never on
// the other lines of the file or the thread count. Log-probs are those of
// `mxrl score` under the same plan (at temperature 1; otherwise of logits / T),
// printed in the shortest form that round-trips the FP32 value.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "cli/commands.h"
#include "interop/compressed_tensors.h"
#include "model/checkpoint.h"
#include "sampler/generate.h"
#include "sampler/prompts.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/progress.h"
#include "util/run_dir.h"
#include "util/thread_pool.h"

namespace mxrl {

namespace {

struct GenerateArgs {
  std::string model, plan = "mxfp8", prompts, out;
  int64_t n = 4, max_new_tokens = 64, top_k = 0;
  float temperature = 1.0f, top_p = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  std::vector<int64_t> stop;
  bool no_default_stop = false;
  int64_t kv_budget = EngineOptions{}.kv_budget_tokens;
};

std::string sample_line(int64_t prompt_index, const GeneratedSample& s, const Tokenizer* tk) {
  std::string line = fmt::format("{{\"prompt_index\": {}, \"sample_index\": {}, \"tokens\": [", prompt_index, s.index);
  for (size_t t = 0; t < s.tokens.size(); ++t) line += fmt::format("{}{}", t ? ", " : "", s.tokens[t]);
  line += "]";
  if (tk) {
    const nlohmann::json text = decode_text(*tk, s.tokens);
    line += ", \"text\": " + text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  line += ", \"logprobs\": [";
  for (size_t t = 0; t < s.logprobs.size(); ++t) {
    if (!std::isfinite(s.logprobs[t]))
      fail("non-finite log-prob {} in prompt {} sample {}", s.logprobs[t], prompt_index, s.index);
    line += fmt::format("{}{}", t ? ", " : "", s.logprobs[t]);  // shortest repr: round-trips exactly
  }
  line += fmt::format("], \"finish_reason\": \"{}\", \"version\": {}}}\n", finish_reason_name(s.finish), s.version);
  return line;
}

void run_generate(const GenerateArgs& a) {
  GenerateOptions o;
  o.n = a.n;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling.temperature = a.temperature;
  o.sampling.top_p = a.top_p;
  o.sampling.top_k = a.top_k;
  o.sampling.validate();
  o.seed = a.seed;
  o.kv_budget = a.kv_budget;
  o.max_new_tokens_name = "--max-new-tokens", o.kv_budget_name = "--kv-budget";
  PrecisionPlan plan = PrecisionPlan::resolve(a.plan);  // fail fast on a bad plan
  make_parent_dirs(a.out);
  const ModelConfig cfg = load_model_config(a.model);
  const TokenizerFiles tok_files = load_tokenizer_files(a.model);
  std::optional<Tokenizer> tk;
  if (!tok_files.tokenizer_json.empty())
    tk = Tokenizer::from_json(tok_files.tokenizer_json, (std::filesystem::path(a.model) / "tokenizer.json").string());
  o.stop_tokens = generation_stop_tokens(cfg, !a.no_default_stop, a.stop, "--stop");

  const std::vector<Prompt> prompts = read_prompts(a.prompts, cfg, tk ? &*tk : nullptr, a.model);
  std::vector<std::vector<int32_t>> tokens_of(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) tokens_of[i] = prompts[i].tokens;

  ThreadPool pool(a.threads);
  const Exec exec{&pool};
  auto model = std::make_shared<const Model>(load_model(a.model, plan, exec));
  Progress progress(std::chrono::milliseconds(100));  // at most ~10 redraws per second
  const auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  const std::vector<GeneratedSample> samples = generate(
      model, tokens_of, o, exec, [&](size_t i) { return fmt::format("{}:{}", a.prompts, prompts[i].line); },
      [&](const GenerateProgress& p) {
        if (!progress.on()) return;
        const double secs = seconds_since(t0);
        progress.show(
            fmt::format("generate {} {}/{} samples, {} tokens, {:.0f} tokens/s", Progress::bar(p.samples, p.total, 30),
                        p.samples, p.total, p.tokens, secs > 0 ? p.tokens / secs : 0.0),
            std::exchange(first, false) || p.samples == p.total);
      });
  const double secs = seconds_since(t0);
  progress.clear();

  std::string text;
  int64_t tokens = 0;
  for (const GeneratedSample& s : samples) {
    text += sample_line(s.request, s, tk ? &*tk : nullptr);
    tokens += static_cast<int64_t>(s.tokens.size());
  }
  write_file_atomic(a.out, text);
  fmt::print(stderr,
             "generated {} samples ({} tokens) for {} prompts under {} in {:.2f} s: {:.0f} tokens/s, {} thread(s), "
             "version 0\n",
             samples.size(), tokens, prompts.size(), model->plan().name, secs, secs > 0 ? tokens / secs : 0.0,
             pool.size());
}

// A check on a numeric option with a plain message: "must be DESC, got S".
CLI::Validator number_check(const std::string& desc, bool (*ok)(double)) {
  return CLI::Validator(
      [desc, ok](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !ok(v)) return "must be " + desc + ", got " + s;
        return {};
      },
      desc);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* c = app.add_subcommand("generate", "Sample completions of prompts under a precision plan");
  c->add_option("--model", a->model, "Checkpoint directory (config.json + safetensors [+ tokenizer.json])")
      ->required()
      ->check(CLI::ExistingDirectory);
  c->add_option("--plan", a->plan,
                "Precision plan: fp32, bf16, mxfp8, mxfp8-half, mxfp8-floor, fp8-block128, fp8-tensor, or a .toml file")
      ->capture_default_str();
  c->add_option("--prompts", a->prompts, "JSONL input: {\"prompt\": \"text\"} or {\"tokens\": [ids...]} per line")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--out", a->out,
                "JSONL output, one line per sample: prompt_index, sample_index, tokens, text, logprobs, "
                "finish_reason, version")
      ->required();
  c->add_option("--n", a->n, "Samples per prompt")
      ->check(number_check(">= 1", [](double v) { return v >= 1; }))
      ->capture_default_str();
  c->add_option("--max-new-tokens", a->max_new_tokens, "Most tokens generated per sample")
      ->check(number_check(">= 1", [](double v) { return v >= 1; }))
      ->capture_default_str();
  c->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->check(number_check(">= 0 (0 is greedy)", [](double v) { return v >= 0 && std::isfinite(v); }))
      ->capture_default_str();
  c->add_option("--top-p", a->top_p, "Nucleus sampling mass, in (0, 1]")
      ->check(number_check("in (0, 1]", [](double v) { return v > 0 && v <= 1; }))
      ->capture_default_str();
  c->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: off)")
      ->check(number_check(">= 0 (0 turns it off)", [](double v) { return v >= 0; }))
      ->capture_default_str();
  c->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  add_threads_option(c, &a->threads);
  c->add_option("--stop", a->stop,
                "Extra stop token id(s), besides the default (the model's EOS, as in RL rollouts; see "
                "--no-default-stop). A sampled stop token ends the sample and is kept")
      ->check(number_check("a token id (>= 0)", [](double v) { return v >= 0; }));
  c->add_flag("--no-default-stop", a->no_default_stop,
              "Do not stop on the default stop token: the model's EOS (config.json eos_token_id, the first if it "
              "lists several), the one RL and SFT rollouts stop on; chat tokens such as <|im_end|> stop only with "
              "--stop");
  c->add_option("--kv-budget", a->kv_budget, "KV cache positions reserved at once (prompt + max-new-tokens per sample)")
      ->check(number_check(">= 1", [](double v) { return v >= 1; }))
      ->capture_default_str();
  c->callback([a] { run_generate(*a); });
}

}  // namespace mxrl
