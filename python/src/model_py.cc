// mxrl.Model (a checkpoint prepared under a precision plan: scoring, logits,
// its manifest), mxrl.Sampler (the rollout engine) and mxrl.Tokenizer: the
// same code paths as `mxrl score` and `mxrl generate`.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <variant>

#include "arrays.h"
#include "interop/compressed_tensors.h"
#include "model/checkpoint.h"
#include "model/digest.h"
#include "model/score.h"
#include "py_model.h"
#include "sampler/engine.h"
#include "sampler/generate.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {

PyModel PyModel::load(const std::filesystem::path& dir_path, const std::string& plan_name, int threads) {
  const std::string dir = dir_path.string();
  PrecisionPlan plan = PrecisionPlan::resolve(plan_name);
  PyModel m;
  m.dir = dir;
  nb::gil_scoped_release unlocked;
  m.pool = std::make_shared<ThreadPool>(threads);
  m.model = std::make_shared<const Model>(load_model(dir, plan, {m.pool.get()}));
  const std::filesystem::path tk = std::filesystem::path(dir) / "tokenizer.json";
  if (std::filesystem::exists(tk)) m.tokenizer = Tokenizer::load(tk.string());
  return m;
}

namespace {

using PromptLen = std::variant<int64_t, std::vector<int64_t>>;

void check_tokens(const std::vector<int32_t>& t, int64_t vocab, const std::string& label) {
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] < 0 || t[i] >= vocab)
      throw nb::value_error(
          fmt::format("{}[{}]: token id {} is outside the model's vocabulary [0, {})", label, i, t[i], vocab).c_str());
}

std::vector<nb::ndarray<nb::numpy, float>> score(const PyModel& m, const std::vector<std::vector<int32_t>>& seqs,
                                                 const PromptLen& prompt_len, int64_t batch_tokens) {
  const ModelConfig& cfg = m.model->config();
  if (batch_tokens < 1) throw nb::value_error(fmt::format("batch_tokens must be >= 1, got {}", batch_tokens).c_str());
  if (const auto* v = std::get_if<std::vector<int64_t>>(&prompt_len); v && v->size() != seqs.size())
    throw nb::value_error(fmt::format("prompt_len: {} values for {} sequences", v->size(), seqs.size()).c_str());
  std::vector<ScoreRequest> reqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::string label = fmt::format("sequences[{}]", i);
    ScoreRequest r;
    r.tokens = seqs[i];
    const int64_t len = static_cast<int64_t>(r.tokens.size());
    if (len < 2)
      throw nb::value_error(fmt::format("{}: a sequence needs at least 2 tokens, got {}", label, len).c_str());
    if (len > cfg.max_position_embeddings)
      throw nb::value_error(fmt::format("{}: {} tokens exceed the model's max_position_embeddings {}", label, len,
                                        cfg.max_position_embeddings)
                                .c_str());
    check_tokens(r.tokens, cfg.vocab_size, label);
    r.prompt_len = std::holds_alternative<int64_t>(prompt_len) ? std::get<int64_t>(prompt_len)
                                                               : std::get<std::vector<int64_t>>(prompt_len)[i];
    if (r.prompt_len < 1 || r.prompt_len > len - 1)
      throw nb::value_error(fmt::format("{}: prompt_len {} must be in [1, {}]", label, r.prompt_len, len - 1).c_str());
    reqs.push_back(std::move(r));
  }
  std::vector<std::vector<float>> out;
  {
    nb::gil_scoped_release unlocked;
    out = score_sequences(*m.model, reqs, {batch_tokens, 0}, {m.pool.get()});
  }
  std::vector<nb::ndarray<nb::numpy, float>> res;
  for (const auto& lp : out) res.push_back(to_array(lp));
  return res;
}

nb::ndarray<nb::numpy, float> logits(const PyModel& m, const std::vector<int32_t>& tokens) {
  const ModelConfig& cfg = m.model->config();
  if (tokens.empty()) throw nb::value_error("tokens: empty sequence");
  if (static_cast<int64_t>(tokens.size()) > cfg.max_position_embeddings)
    throw nb::value_error(fmt::format("tokens: {} tokens exceed the model's max_position_embeddings {}", tokens.size(),
                                      cfg.max_position_embeddings)
                              .c_str());
  check_tokens(tokens, cfg.vocab_size, "tokens");
  std::vector<float> l;
  {
    nb::gil_scoped_release unlocked;
    l = sequence_logits(*m.model, tokens, {m.pool.get()});
  }
  float* p = nullptr;
  auto out = new_array<float>({static_cast<int64_t>(tokens.size()), cfg.vocab_size}, &p);
  std::copy(l.begin(), l.end(), p);
  return out;
}

struct PySampler {
  PyModel model;
  int64_t kv_budget;
  bool prefix_sharing;
};

nb::list py_generate(const PySampler& s, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                  int64_t max_new_tokens, float temperature, float top_p, int64_t top_k, uint64_t seed,
                  std::optional<std::vector<int64_t>> stop_tokens, bool full_rows) {
  GenerateOptions o;
  o.n = n;
  o.max_new_tokens = max_new_tokens;
  o.sampling.temperature = temperature;
  o.sampling.top_p = top_p;
  o.sampling.top_k = top_k;
  o.seed = seed;
  const std::vector<int64_t> listed = stop_tokens.value_or(std::vector<int64_t>{});
  o.stop_tokens = generation_stop_tokens(s.model.model->config(), !stop_tokens, listed, "stop_tokens");
  o.kv_budget = s.kv_budget;
  o.prefix_sharing = s.prefix_sharing;
  o.record_logits = full_rows;
  std::vector<GeneratedSample> samples;
  {
    nb::gil_scoped_release unlocked;
    samples = mxrl::generate(s.model.model, prompts, o, {s.model.pool.get()},
                             [](size_t i) { return fmt::format("prompts[{}]", i); });
  }
  nb::list out;
  for (size_t i = 0; i < prompts.size(); ++i) out.append(nb::list());
  for (const GeneratedSample& g : samples) {
    nb::dict d;
    d["tokens"] = to_array(g.tokens);
    d["logprobs"] = to_array(g.logprobs);
    d["finish_reason"] = finish_reason_name(g.finish);
    d["version"] = g.version;
    if (s.model.tokenizer) d["text"] = s.model.tokenizer->decode(g.tokens);
    if (full_rows) {
      float* p = nullptr;
      const int64_t V = s.model.model->config().vocab_size;
      auto rows = new_array<float>({static_cast<int64_t>(g.tokens.size()), V}, &p);
      std::copy(g.logits.begin(), g.logits.end(), p);
      d["logits"] = rows;
    }
    nb::cast<nb::list>(out[g.request]).append(d);
  }
  return out;
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer", "A tokenizer.json (BPE, byte-level or mxrl's character tokenizer).")
      .def_static(
          "load", [](const std::filesystem::path& p) { return Tokenizer::load(p.string()); }, nb::arg("path"),
          "Load a tokenizer.json file.")
      .def_static("builtin_char", &builtin_char_tokenizer,
                  "The character tokenizer of the built-in tasks and the tiny presets.")
      .def(
          "encode", [](const Tokenizer& t, const std::string& s) { return t.encode(s); }, nb::arg("text"),
          "Token ids of ``text`` (no special tokens added).")
      .def(
          "decode", [](const Tokenizer& t, const std::vector<int32_t>& ids) { return t.decode(ids); }, nb::arg("ids"),
          "The text of ``ids``.")
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size);

  nb::class_<PyModel>(m, "Model",
                      "A checkpoint prepared to compute under a precision plan: the forward pass the sampler and "
                      "`mxrl score` run.")
      .def_static("load", &PyModel::load, nb::arg("dir"), nb::arg("plan") = "mxfp8", nb::arg("threads") = 0,
                  R"doc(Load a checkpoint directory (config.json + safetensors, or an MXFP8 compressed-tensors
export) and prepare it under ``plan``: fp32, bf16, mxfp8, mxfp8-half, mxfp8-floor,
fp8-block128, fp8-tensor (+fp8kv), or a plan .toml. ``threads``: 0 for every core.)doc")
      .def_prop_ro(
          "config", [](const PyModel& p) { return json_to_py(p.model->config().to_json()); },
          "The model's config.json fields.")
      .def_prop_ro(
          "plan", [](const PyModel& p) { return p.model->plan().name; }, "The precision plan's name.")
      .def_prop_ro(
          "tokenizer", [](const PyModel& p) { return p.tokenizer; }, "The directory's tokenizer.json, if it has one.")
      .def(
          "manifest", [](const PyModel& p) { return json_to_py(digests_to_json(model_digests(*p.model))); },
          "What the model computes with, one digest per part (docs/reference.md §6): name, part, dtype, shape, "
          "precision, "
          "xxh3, bytes.")
      .def("score", &score, nb::arg("sequences"), nb::arg("prompt_len") = 1, nb::arg("batch_tokens") = 4096,
           R"doc(Per-token log-probs at temperature 1 of ``sequences`` (lists of token ids), for tokens
prompt_len .. len-1 of each (``prompt_len``: one int or one per sequence). One float32
array per sequence, bit for bit those of `mxrl score` and of the sampler, whatever the
batching.)doc")
      .def("logits", &logits, nb::arg("tokens"), "FP32 logits [len, vocab] of one sequence.");

  nb::class_<PySampler>(m, "Sampler", "The rollout engine (batched generation with a KV cache) over a Model.")
      .def(nb::init<PyModel, int64_t, bool>(), nb::arg("model"),
           nb::arg("kv_budget") = EngineOptions{}.kv_budget_tokens, nb::arg("prefix_sharing") = true,
           "``kv_budget``: KV cache positions reserved at once; results do not depend on it or on prefix sharing.")
      .def("generate", &py_generate, nb::arg("prompts"), nb::arg("n") = 1, nb::arg("max_new_tokens") = 64,
           nb::arg("temperature") = 1.0f, nb::arg("top_p") = 1.0f, nb::arg("top_k") = 0, nb::arg("seed") = 0,
           nb::arg("stop_tokens") = nb::none(), nb::arg("full_rows") = false,
           R"doc(Sample ``n`` completions of each prompt (lists of token ids). Returns, per prompt, a list of
dicts: tokens (int32), logprobs (float32, at the sampling temperature), finish_reason
("stop" or "length"), version, and text when the model has a tokenizer. A sample depends
only on (seed, prompt index, sample index): the same as `mxrl generate --seed` on the same
prompts. ``stop_tokens``: None for the default, the model's EOS token (config.json
eos_token_id, the first if it lists several): the one stop of `mxrl generate` and of RL
and SFT rollouts, so a sample here reproduces a rollout. Chat tokens such as
<|im_end|> stop only when listed; a list replaces the default. ``full_rows``: each sample also
carries ``logits`` [tokens, vocab], the raw FP32 logit rows its tokens were sampled from.)doc");
}

}  // namespace mxrl
