// Qwen3 / Qwen3-MoE model configuration: the fields of a Hugging Face
// config.json that the model definition uses (BRIEF §8), validated.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mxrl {

struct ModelConfig {
  std::string model_type = "qwen3";  // "qwen3" or "qwen3_moe"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;     // dense MLP width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "float32";
  // MoE (num_experts == 0: dense everywhere)
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  // Token ids (optional in config.json)
  int64_t bos_token_id = -1, eos_token_id = -1;

  bool is_moe() const { return num_experts > 0; }
  // As transformers' Qwen3MoeDecoderLayer decides.
  bool is_moe_layer(int64_t layer) const;
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }

  // Throws mxrl::Error naming `label` and the field.
  void validate(const std::string& label) const;
  static ModelConfig from_json(const nlohmann::json& j, const std::string& label);
  static ModelConfig load(const std::string& path);  // a config.json
  nlohmann::json to_json() const;
};

}  // namespace mxrl
