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

#include "cli/commands.h"
#include "util/progress.h"
#include "model/checkpoint.h"
#include "model/compressed_tensors.h"
#include "sampler/engine.h"
#include "sampler/prompts.h"
#include "tokenizer/tokenizer.h"
#include "util/atomic_file.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl::cli {

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

std::string sample_line(int64_t prompt_index, const GeneratedSample& s, const tok::Tokenizer* tk) {
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
  SamplingParams sp;
  sp.temperature = a.temperature;
  sp.top_p = a.top_p;
  sp.top_k = a.top_k;
  sp.validate();
  PrecisionPlan plan = PrecisionPlan::resolve(a.plan);  // fail fast on a bad plan
  {
    const std::filesystem::path parent = std::filesystem::path(a.out).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      fail("{}: the output directory {} does not exist", a.out, parent.string());
  }
  const ModelConfig cfg = load_model_config(a.model);
  const TokenizerFiles tok_files = load_tokenizer_files(a.model);
  std::optional<tok::Tokenizer> tk;
  if (!tok_files.tokenizer_json.empty())
    tk = tok::Tokenizer::from_json(tok_files.tokenizer_json, (std::filesystem::path(a.model) / "tokenizer.json").string());

  // Stop tokens: the defaults that exist in this model, then --stop.
  std::vector<int32_t> stop;
  if (!a.no_default_stop) stop = default_stop_tokens(cfg, tk ? &*tk : nullptr);
  for (int64_t id : a.stop) {
    if (id < 0 || id >= cfg.vocab_size)
      fail("--stop {}: unknown token id, outside the model's vocabulary [0, {})", id, cfg.vocab_size);
    stop.push_back(static_cast<int32_t>(id));
  }
  std::sort(stop.begin(), stop.end());
  stop.erase(std::unique(stop.begin(), stop.end()), stop.end());

  const std::vector<Prompt> prompts = read_prompts(a.prompts, cfg, tk ? &*tk : nullptr, a.model);

  ThreadPool pool(a.threads);
  const Exec exec{&pool};
  const uint64_t version = 0;  // a checkpoint from disk: the first version
  EngineOptions eo;
  eo.kv_budget_tokens = a.kv_budget;
  eo.max_prefill_tokens = std::max(eo.max_prefill_tokens, cfg.max_position_embeddings);  // any valid prompt fits
  auto model = std::make_shared<const Model>(load_model(a.model, plan, exec));
  Engine engine(model, version, eo, exec);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].tokens.size());
    const int64_t need = std::min(len + a.max_new_tokens, cfg.max_position_embeddings);
    if (need > a.kv_budget)
      fail("{}:{}: a sample of this prompt ({} tokens) with --max-new-tokens {} needs {} KV cache positions, more "
           "than --kv-budget {}",
           a.prompts, prompts[i].line, len, a.max_new_tokens, need, a.kv_budget);
    GenerationRequest r;
    r.id = static_cast<int64_t>(i);
    r.prompt = prompts[i].tokens;
    r.n = a.n;
    r.max_new_tokens = a.max_new_tokens;
    r.sampling = sp;
    r.stop_tokens = stop;
    r.seed = a.seed;
    try {
      engine.submit(r);
    } catch (const Error& e) {
      fail("{}:{}: {}", a.prompts, prompts[i].line, e.what());
    }
  }

  const int64_t total = static_cast<int64_t>(prompts.size()) * a.n;
  std::vector<GeneratedSample> samples;
  samples.reserve(total);
  Progress progress(std::chrono::milliseconds(100));  // at most ~10 redraws per second
  int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto show = [&](bool force) {
    if (!progress.on()) return;
    const double secs = seconds_since(t0);
    const int64_t n = static_cast<int64_t>(samples.size());
    progress.show(fmt::format("generate {} {}/{} samples, {} tokens, {:.0f} tokens/s", Progress::bar(n, total, 30), n,
                              total, tokens, secs > 0 ? tokens / secs : 0.0),
                  force);
  };
  show(true);
  while (!engine.idle()) {
    std::vector<GeneratedSample> done = engine.step();
    tokens += engine.running() + static_cast<int64_t>(done.size());  // one token per sample in the step
    for (auto& s : done) samples.push_back(std::move(s));
    show(false);
  }
  const double secs = seconds_since(t0);
  show(true);
  progress.clear();
  if (static_cast<int64_t>(samples.size()) != total)
    fail("internal: the engine returned {} samples, expected {}", samples.size(), total);
  std::sort(samples.begin(), samples.end(), [](const GeneratedSample& x, const GeneratedSample& y) {
    return x.request != y.request ? x.request < y.request : x.index < y.index;
  });

  std::string text;
  tokens = 0;
  for (const GeneratedSample& s : samples) {
    text += sample_line(s.request, s, tk ? &*tk : nullptr);
    tokens += static_cast<int64_t>(s.tokens.size());
  }
  write_file_atomic(a.out, text);
  fmt::print(stderr,
             "generated {} samples ({} tokens) for {} prompts under {} in {:.2f} s: {:.0f} tokens/s, {} thread(s), "
             "version {}\n",
             samples.size(), tokens, prompts.size(), engine.model().plan().name, secs, secs > 0 ? tokens / secs : 0.0,
             pool.size(), engine.version());
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
  c->add_option("--n", a->n, "Samples per prompt")->check(number_check(">= 1", [](double v) { return v >= 1; }))
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
  c->add_option("--stop", a->stop, "Extra stop token id(s) (a sampled stop token ends the sample and is kept)")
      ->check(number_check("a token id (>= 0)", [](double v) { return v >= 0; }));
  c->add_flag("--no-default-stop", a->no_default_stop,
              "Do not stop on <|endoftext|>, <|im_end|> and the config's eos_token_id");
  c->add_option("--kv-budget", a->kv_budget, "KV cache positions reserved at once (prompt + max-new-tokens per sample)")
      ->check(number_check(">= 1", [](double v) { return v >= 1; }))
      ->capture_default_str();
  c->callback([a] { run_generate(*a); });
}

}  // namespace mxrl::cli
