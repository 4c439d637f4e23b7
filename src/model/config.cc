#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace mxrl {

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
    return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

void ModelConfig::validate(const std::string& label) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail("{}: {} must be positive (got {})", label, name, v);
  };
  if (model_type != "qwen3" && model_type != "qwen3_moe")
    fail("{}: model_type '{}' is not supported (qwen3, qwen3_moe)", label, model_type);
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", label,
         num_attention_heads, num_key_value_heads);
  if (head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for RoPE", label, head_dim);
  if (!(rms_norm_eps > 0)) fail("{}: rms_norm_eps must be positive", label);
  if (!(rope_theta > 0)) fail("{}: rope_theta must be positive", label);
  bool any_dense = !is_moe();
  for (int64_t i = 0; i < num_hidden_layers; ++i) any_dense |= !is_moe_layer(i);
  if (any_dense) positive("intermediate_size", intermediate_size);
  if (is_moe()) {
    positive("num_experts_per_tok", num_experts_per_tok);
    positive("moe_intermediate_size", moe_intermediate_size);
    positive("decoder_sparse_step", decoder_sparse_step);
    if (num_experts_per_tok > num_experts)
      fail("{}: num_experts_per_tok ({}) exceeds num_experts ({})", label, num_experts_per_tok, num_experts);
  }
  for (int64_t l : mlp_only_layers)
    if (l < 0 || l >= num_hidden_layers) fail("{}: mlp_only_layers names layer {} of {}", label, l, num_hidden_layers);
}

namespace {
template <typename T>
void get(const nlohmann::json& j, const char* key, T& out, const std::string& label, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) fail("{}: missing field '{}'", label, key);
    return;
  }
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: field '{}' has the wrong type ({})", label, key, it->type_name());
  }
}
}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& label) {
  if (!j.is_object()) fail("{}: config is not a JSON object", label);
  ModelConfig c;
  get(j, "model_type", c.model_type, label, true);
  get(j, "vocab_size", c.vocab_size, label, true);
  get(j, "hidden_size", c.hidden_size, label, true);
  get(j, "num_hidden_layers", c.num_hidden_layers, label, true);
  get(j, "num_attention_heads", c.num_attention_heads, label, true);
  c.num_key_value_heads = c.num_attention_heads;
  get(j, "num_key_value_heads", c.num_key_value_heads, label, false);
  c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  get(j, "head_dim", c.head_dim, label, false);
  get(j, "intermediate_size", c.intermediate_size, label, c.model_type == "qwen3");
  get(j, "max_position_embeddings", c.max_position_embeddings, label, false);
  get(j, "rms_norm_eps", c.rms_norm_eps, label, false);
  get(j, "rope_theta", c.rope_theta, label, false);
  get(j, "tie_word_embeddings", c.tie_word_embeddings, label, false);
  get(j, "torch_dtype", c.torch_dtype, label, false);
  get(j, "bos_token_id", c.bos_token_id, label, false);
  get(j, "eos_token_id", c.eos_token_id, label, false);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    fail("{}: rope_scaling is not supported", label);
  if (j.value("attention_bias", false)) fail("{}: attention_bias is not supported (Qwen3 has no biases)", label);
  if (j.value("use_sliding_window", false)) fail("{}: use_sliding_window is not supported", label);
  if (c.model_type == "qwen3_moe") {
    get(j, "num_experts", c.num_experts, label, true);
    get(j, "num_experts_per_tok", c.num_experts_per_tok, label, true);
    get(j, "moe_intermediate_size", c.moe_intermediate_size, label, true);
    get(j, "norm_topk_prob", c.norm_topk_prob, label, false);
    get(j, "decoder_sparse_step", c.decoder_sparse_step, label, false);
    get(j, "mlp_only_layers", c.mlp_only_layers, label, false);
    get(j, "router_aux_loss_coef", c.router_aux_loss_coef, label, false);
  }
  c.validate(label);
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {
      {"architectures", {is_moe() ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", tie_word_embeddings},
      {"torch_dtype", torch_dtype},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"use_cache", true},
  };
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  if (is_moe()) {
    j["num_experts"] = num_experts;
    j["num_experts_per_tok"] = num_experts_per_tok;
    j["moe_intermediate_size"] = moe_intermediate_size;
    j["norm_topk_prob"] = norm_topk_prob;
    j["decoder_sparse_step"] = decoder_sparse_step;
    j["mlp_only_layers"] = mlp_only_layers;
    j["router_aux_loss_coef"] = router_aux_loss_coef;
    j["output_router_logits"] = false;
  }
  return j;
}

}  // namespace mxrl
