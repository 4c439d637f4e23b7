// Small model configs shared by the model tests (header-only, tests only).
#pragma once
#include "model/config.h"

namespace mxrl {

// hidden 64, 4 query / 2 KV heads of 32, vocab 96. Dense: 2 layers, tied
// embeddings. MoE: 3 layers, 4 experts top-2, layer 1 a dense MLP, untied.
inline ModelConfig small_test_config(bool moe) {
  ModelConfig c;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.num_hidden_layers = moe ? 3 : 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 64;
  c.max_position_embeddings = 128;
  if (moe) {
    c.model_type = "qwen3_moe";
    c.num_experts = 4;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;
    c.mlp_only_layers = {1};
    c.norm_topk_prob = true;
    c.tie_word_embeddings = false;
  } else {
    c.tie_word_embeddings = true;
  }
  c.validate("test");
  return c;
}

}  // namespace mxrl
