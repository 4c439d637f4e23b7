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
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>
#include <variant>

#include "arrays.h"
#include "interop/compressed_tensors.h"
#include "kernels/ops/ops.h"
#include "model/checkpoint.h"
#include "model/digest.h"
#include "model/forward.h"
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

// Model.trace: the learner's forward of one sequence with a ForwardTrace, as
// named arrays (keys in the docstring of bind_model). step 0: one forward()
// over every token; step s: s tokens per forward() through the KV cache.
nb::dict trace(const PyModel& m, const std::vector<int32_t>& tokens, int64_t step) {
  const ModelConfig& c = m.model->config();
  if (tokens.empty()) throw nb::value_error("tokens: empty sequence");
  if (static_cast<int64_t>(tokens.size()) > c.max_position_embeddings)
    throw nb::value_error(fmt::format("tokens: {} tokens exceed the model's max_position_embeddings {}", tokens.size(),
                                      c.max_position_embeddings)
                              .c_str());
  if (step < 0) throw nb::value_error(fmt::format("step must be >= 0, got {}", step).c_str());
  check_tokens(tokens, c.vocab_size, "tokens");
  const int64_t n = static_cast<int64_t>(tokens.size()), H = c.hidden_size, V = c.vocab_size;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), F = c.intermediate_size, L = c.num_hidden_layers;
  // name -> (row width, values [n, width]), in the order returned.
  std::vector<std::pair<std::string, std::pair<int64_t, std::vector<float>>>> out;
  {
    nb::gil_scoped_release unlocked;
    const Exec exec{m.pool.get()};
    KvCache cache(c);
    const int slot = cache.add_sequence();
    ForwardWorkspace ws;
    std::vector<ForwardTrace> calls;  // one per forward()
    std::vector<float> logits(n * V);
    const int64_t chunk = step == 0 ? n : step;
    for (int64_t p0 = 0; p0 < n; p0 += chunk) {
      TokenBatch b;
      for (int64_t i = p0; i < std::min(n, p0 + chunk); ++i) b.add(tokens[i], slot, i);
      calls.emplace_back();
      forward(*m.model, cache, b, logits.data() + p0 * V, exec, nullptr, &calls.back(), &ws);
    }
    auto put = [&](const std::string& name, int64_t width, std::vector<float> v) {
      out.push_back({name, {width, std::move(v)}});
    };
    // The rows of every call, in order: field(t) is one call's [rows, width].
    auto rows = [&](auto field) {
      std::vector<float> v;
      for (const ForwardTrace& t : calls) v.insert(v.end(), field(t).begin(), field(t).end());
      return v;
    };
    auto of_layer = [&](int64_t l, std::vector<float> LayerTrace::*f) {
      return rows([=](const ForwardTrace& t) -> const std::vector<float>& { return t.layers[l].*f; });
    };
    // Layer l's keys or values at positions 0 .. n-1 as the cache holds them [n, kv_dim].
    auto cached = [&](int64_t l, bool keys) {
      std::vector<float> v(n * kvd);
      const int64_t hd = cache.head_dim();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t g = 0; g < cache.groups(); ++g)
          std::memcpy(&v[i * kvd + g * hd], keys ? cache.k(slot, l, g, i) : cache.v(slot, l, g, i), hd * sizeof(float));
      return v;
    };
    // Row-wise concatenation of (a[n, wa], wa), (b[n, wb], wb), ... -> [n, wa + wb + ...].
    auto concat = [&](std::initializer_list<std::pair<const std::vector<float>*, int64_t>> parts) {
      size_t total = 0;
      for (const auto& part : parts) total += part.first->size();
      std::vector<float> v;
      v.reserve(total);
      for (int64_t i = 0; i < n; ++i)
        for (const auto& [a, w] : parts) v.insert(v.end(), a->begin() + i * w, a->begin() + (i + 1) * w);
      return v;
    };
    put("embed", H, of_layer(0, &LayerTrace::x_in));
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = fmt::format("layers.{}.", l);
      put(p + "input_layernorm", H, of_layer(l, &LayerTrace::xn1));
      const std::vector<float> q_raw = of_layer(l, &LayerTrace::q_raw), k_raw = of_layer(l, &LayerTrace::k_raw);
      const std::vector<float> v = cached(l, false);
      put(p + "qkv_proj", qd + 2 * kvd, concat({{&q_raw, qd}, {&k_raw, kvd}, {&v, kvd}}));
      put(p + "rotary_q", qd, of_layer(l, &LayerTrace::q));
      put(p + "rotary_k", kvd, cached(l, true));
      put(p + "attn", qd, of_layer(l, &LayerTrace::att));
      put(p + "residual_mid", H, of_layer(l, &LayerTrace::x_mid));
      put(p + "post_attention_layernorm", H, of_layer(l, &LayerTrace::xn2));
      if (m.model->layer(l).moe) {
        put(p + "router", c.num_experts, of_layer(l, &LayerTrace::router_logits));
      } else {
        const std::vector<float> g = of_layer(l, &LayerTrace::gate), u = of_layer(l, &LayerTrace::up);
        put(p + "gate_up_proj", 2 * F, concat({{&g, F}, {&u, F}}));
        put(p + "act", F, of_layer(l, &LayerTrace::h));
      }
      put(p + "out", H,
          l + 1 < L ? of_layer(l + 1, &LayerTrace::x_in)
                    : rows([](const ForwardTrace& t) -> const std::vector<float>& { return t.x_final; }));
    }
    put("norm", H, rows([](const ForwardTrace& t) -> const std::vector<float>& { return t.xn_final; }));
    std::vector<float> lp(n * V);
    log_softmax_forward(lp.data(), logits.data(), n, V, exec);
    out.push_back({"logits", {V, std::move(logits)}});
    out.push_back({"logprobs", {V, std::move(lp)}});
  }
  nb::dict d;
  for (const auto& [name, a] : out) {
    float* p = nullptr;
    auto arr = new_array<float>({n, a.first}, &p);
    std::copy(a.second.begin(), a.second.end(), p);
    d[name.c_str()] = arr;
  }
  return d;
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
          "config",
          [](const PyModel& p) {
            const ModelConfig& c = p.model->config();
            nlohmann::json j = c.to_json();
            // Keys config.json leaves out where unused, so that every model answers them.
            for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size"})
              if (!j.contains(k)) j[k] = 0;
            if (!j.contains("norm_topk_prob")) j["norm_topk_prob"] = c.norm_topk_prob;
            if (!j.contains("intermediate_size")) j["intermediate_size"] = c.intermediate_size;
            return json_to_py(j);
          },
          "The model's config.json fields (hidden_size, num_hidden_layers, num_attention_heads, "
          "num_key_value_heads, head_dim, intermediate_size, rms_norm_eps, rope_theta, vocab_size, "
          "tie_word_embeddings, ...), with num_experts, num_experts_per_tok, moe_intermediate_size (0) and "
          "norm_topk_prob for dense models too.")
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
      .def("logits", &logits, nb::arg("tokens"), "FP32 logits [len, vocab] of one sequence.")
      .def("trace", &trace, nb::arg("tokens"), nb::arg("step") = 0,
           R"doc(The learner's forward pass of one sequence (token ids), every activation by name:
float32 arrays [n, width] (n = len(tokens), H hidden, F intermediate, E experts):

- ``embed`` [n, H]: the embeddings (layer 0's input);
- per layer l, ``layers.{l}.`` + ``input_layernorm`` [n, H]; ``qkv_proj`` [n, q_dim + 2 kv_dim]
  (q | k | v projections; v as the KV cache holds it, so on the FP8 grid under an
  +fp8kv plan); ``rotary_q`` [n, q_dim] and ``rotary_k`` [n, kv_dim] (after q_norm / k_norm
  and RoPE; k from the KV cache); ``attn`` [n, q_dim] (o_proj's input); ``residual_mid``
  [n, H]; ``post_attention_layernorm`` [n, H]; dense layers: ``gate_up_proj`` [n, 2F]
  (gate | up) and ``act`` [n, F] (SwiGLU); MoE layers: ``router`` [n, E] (router logits);
  ``out`` [n, H] (the residual stream leaving the layer);
- ``norm`` [n, H] (after the final norm), ``logits`` [n, vocab], ``logprobs`` [n, vocab].

step 0: one forward() over all tokens (the learner's pass); step s > 0: s tokens per
forward() through the KV cache (1: the sampler's decode), the calls' rows concatenated.
Every step gives the same bits: the learner/sampler contract.)doc");

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
