// Qwen3 / Qwen3-MoE model configuration: the fields of a Hugging Face
// config.json that the model definition uses (docs/reference.md §8), validated.
//
// config.json is read as transformers reads it, in both spellings it has
// written: 4.x (top-level rope_theta, rope_scaling, num_experts, torch_dtype)
// and 5.x (rope_parameters, num_local_experts, dtype). Every key of the file is
// either read, known to leave the math unchanged, or refused with one line
// naming the field (unknown keys included: a field mxrl does not know might
// change the math, as rope_parameters once did).
//
// Defaults, in one place: the member initializers below marked [default] are
// what transformers' Qwen3Config / Qwen3MoeConfig give a field that config.json
// leaves out (4.57 and 5.x agree on each), and mxrl assumes exactly these. The
// one computed default is head_dim (see below). Every other field is required.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mxrl {

struct ModelConfig {
  std::string model_type = "qwen3";  // "qwen3" or "qwen3_moe" (required in config.json)
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width (required when a layer is dense)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // null in a qwen3 config.json: num_attention_heads, as transformers does
  // [default] qwen3: 128 (Qwen3Config.head_dim); qwen3_moe: hidden_size / num_attention_heads
  // (Qwen3MoeConfig has no head_dim field; the attention falls back to that).
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 32768;  // [default]
  double rms_norm_eps = 1e-6;               // [default]
  double rope_theta = 10000.0;              // [default] rope_parameters.rope_theta / rope_theta
  bool tie_word_embeddings = false;         // [default]
  std::string torch_dtype = "float32";      // informational: the safetensors dtypes are what load
  // MoE (num_experts == 0: dense everywhere)
  int64_t num_experts = 0;  // config.json: num_experts (4.x) or num_local_experts (5.x)
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;           // [default]
  int64_t decoder_sparse_step = 1;       // [default]
  std::vector<int64_t> mlp_only_layers;  // [default] empty (null reads as empty, as in transformers)
  double router_aux_loss_coef = 0.001;   // [default]
  // Token ids (optional; transformers' default is null, here -1 / empty)
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;  // config.json: an id or a list of ids

  bool is_moe() const { return num_experts > 0; }
  // As transformers' Qwen3MoeDecoderLayer decides.
  bool is_moe_layer(int64_t layer) const;
  bool has_dense_layer() const;  // some layer has a dense MLP (intermediate_size is used)
  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  // The first eos id, or -1.
  int64_t eos_token_id() const { return eos_token_ids.empty() ? -1 : eos_token_ids.front(); }

  // Throws mxrl::Error naming `label` and the field.
  void validate(const std::string& label) const;
  static ModelConfig from_json(const nlohmann::json& j, const std::string& label);
  static ModelConfig load(const std::string& path);  // a config.json
  // A config.json that transformers 4.x and 5.x both load as this config
  // (rope_theta and rope_parameters; num_experts and num_local_experts).
  nlohmann::json to_json() const;
};

}  // namespace mxrl
