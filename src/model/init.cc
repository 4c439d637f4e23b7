#include "model/init.h"

#include <cmath>
#include <random>

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

std::vector<std::string> preset_names() { return {"tiny-dense", "tiny-moe"}; }

ModelConfig preset_config(const std::string& name, int64_t vocab_size) {
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
  if (name == "tiny-moe") {
    c.model_type = "qwen3_moe";
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 256;
    c.norm_topk_prob = true;
    c.tie_word_embeddings = false;
  } else if (name != "tiny-dense") {
    fail("unknown preset '{}' (tiny-dense, tiny-moe)", name);
  }
  c.validate("preset " + name);
  return c;
}

}  // namespace mxrl
