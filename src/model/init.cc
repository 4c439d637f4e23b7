#include "model/init.h"

#include <cmath>
#include <random>

#include <fmt/ranges.h>

#include "util/error.h"

namespace mxrl {

void init_params(ParamTable& params, uint64_t seed, float std) {
  std::mt19937_64 rng(seed);
  const float out_scale = 1.0f / std::sqrt(2.0f * static_cast<float>(params.config().num_hidden_layers));
  params.for_each([&](const ParamInfo& p, float* w) {
    if (p.role == ParamRole::Norm) {
      std::fill(w, w + p.numel, 1.0f);
      return;
    }
    const bool out_proj = p.role == ParamRole::Linear && (p.linear == LinearKind::O || p.linear == LinearKind::Down);
    std::normal_distribution<float> nd(0.0f, out_proj ? std * out_scale : std);
    for (int64_t i = 0; i < p.numel; ++i) w[i] = nd(rng);
  });
}

namespace {

ModelConfig tiny(bool moe, int64_t vocab_size) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.hidden_size = 256;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 1024;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.intermediate_size = 768;
  if (moe) {
    c.model_type = "qwen3_moe";
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 256;
    c.norm_topk_prob = true;
    c.tie_word_embeddings = false;
  }
  return c;
}

ModelConfig qwen3_06b() {  // Qwen3-0.6B's config.json
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 1024;
  c.intermediate_size = 3072;
  c.num_hidden_layers = 28;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 40960;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.tie_word_embeddings = true;
  c.torch_dtype = "bfloat16";
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

struct Shape {
  const char* name;
  bool preset;
  ModelConfig (*make)(int64_t vocab_size);
};
const Shape kShapes[] = {
    {"tiny-dense", true, [](int64_t v) { return tiny(false, v); }},
    {"tiny-moe", true, [](int64_t v) { return tiny(true, v); }},
    {"qwen3-0.6b", false, [](int64_t) { return qwen3_06b(); }},
};

std::vector<std::string> names(bool presets_only) {
  std::vector<std::string> out;
  for (const Shape& s : kShapes)
    if (s.preset || !presets_only) out.push_back(s.name);
  return out;
}

ModelConfig make_shape(const std::string& name, int64_t vocab_size, bool presets_only) {
  for (const Shape& s : kShapes) {
    if (name != s.name || (presets_only && !s.preset)) continue;
    ModelConfig c = s.make(vocab_size);
    c.validate("preset " + name);
    return c;
  }
  fail("unknown {} '{}' ({})", presets_only ? "preset" : "model shape", name, fmt::join(names(presets_only), ", "));
}

}  // namespace

std::vector<std::string> shape_names() { return names(false); }
std::vector<std::string> preset_names() { return names(true); }
ModelConfig shape_config(const std::string& name, int64_t vocab_size) { return make_shape(name, vocab_size, false); }
ModelConfig preset_config(const std::string& name, int64_t vocab_size) { return make_shape(name, vocab_size, true); }

}  // namespace mxrl
