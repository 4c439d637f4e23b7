#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "util/error.h"
#include "util/json_read.h"

namespace mxrl {

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

bool ModelConfig::has_dense_layer() const {
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    if (!is_moe_layer(i)) return true;
  return false;
}

void ModelConfig::validate(const std::string& label) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail("{}: {} must be positive (got {})", label, name, v);
  };
  if (model_type != "qwen3" && model_type != "qwen3_moe")
    fail("{}: model_type {} is not supported (qwen3, qwen3_moe)", label, json_brief(nlohmann::json(model_type)));
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("head_dim", head_dim);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_attention_heads % num_key_value_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", label, num_attention_heads,
         num_key_value_heads);
  if (head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for RoPE", label, head_dim);
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) fail("{}: rms_norm_eps must be positive", label);
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) fail("{}: rope_theta must be positive", label);
  if (has_dense_layer()) positive("intermediate_size", intermediate_size);
  if (num_experts < 0) fail("{}: num_experts must not be negative (got {})", label, num_experts);
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

using json = nlohmann::json;

// Sizes and counts: positive and small enough that products of two fit int64.
constexpr int64_t kMaxDim = int64_t{1} << 31;

// Keys transformers writes (or has written) into a Qwen3 config.json that do
// not change the forward or backward math mxrl computes: bookkeeping, HF
// generation/output switches, and sliding-window settings that only apply
// when use_sliding_window (refused) is true.
const std::set<std::string, std::less<>>& inert_keys() {
  static const std::set<std::string, std::less<>> k = {
      "architectures", "transformers_version", "_name_or_path", "initializer_range", "use_cache", "sliding_window",
      "max_window_layers", "pad_token_id", "sep_token_id", "decoder_start_token_id", "output_hidden_states",
      "output_attentions", "return_dict", "chunk_size_feed_forward", "problem_type", "id2label", "label2id",
      "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "torchscript", "use_bfloat16",
      "tf_legacy_loss", "is_decoder", "add_cross_attention", "tie_encoder_decoder", "_attn_implementation_autoset",
      // Qwen3-MoE: whether transformers' own forward returns router logits (and adds the
      // auxiliary loss when training there); mxrl's aux loss is a training setting.
      "output_router_logits"};
  return k;
}

// Reads fields of one config object by name and remembers which it saw, so
// that the keys left over can be refused.
class Fields {
 public:
  Fields(const json& j, const std::string& label) : j_(j), label_(label) {}

  // The value of `key`, or nullptr when the file leaves it out. null counts as present.
  const json* find(std::string_view key) {
    seen_.insert(std::string(key));
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json* find_non_null(std::string_view key) {
    const json* v = find(key);
    if (v && v->is_null()) fail("{}: field '{}' is null", label_, key);
    return v;
  }
  const json& require(std::string_view key) {
    const json* v = find(key);
    if (!v) fail("{}: missing field '{}'", label_, key);
    if (v->is_null()) fail("{}: field '{}' is null", label_, key);
    return *v;
  }
  std::string where(std::string_view key) const { return fmt::format("{}: field '{}'", label_, key); }

  void integer(std::string_view key, int64_t& out, int64_t lo, int64_t hi, bool required) {
    if (const json* v = required ? &require(key) : find_non_null(key)) out = json_integer(*v, lo, hi, where(key));
  }
  void number(std::string_view key, double& out) {
    if (const json* v = find_non_null(key)) out = json_number(*v, where(key));
  }
  void boolean(std::string_view key, bool& out) {
    if (const json* v = find_non_null(key)) out = json_boolean(*v, where(key));
  }
  // A field mxrl does not implement: accepted only at the value that leaves the math unchanged.
  template <typename T>
  void must_be(std::string_view key, const T& inert, std::string_view why) {
    const json* v = find(key);
    if (v && !v->is_null() && *v != json(inert))
      fail("{}: field '{}' = {} is not supported ({})", label_, key, json_brief(*v), why);
  }
  // Every key not read above must be inert.
  void refuse_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()) && !inert_keys().count(it.key()))
        fail(
            "{}: unknown field {}: mxrl cannot tell whether it changes the model's math, so it refuses the "
            "config (src/model/config.cc lists the fields it reads, ignores and refuses)",
            label_, json_brief(nlohmann::json(it.key())));  // quoted and escaped: one line whatever the key
  }

 private:
  const json& j_;
  const std::string& label_;
  std::set<std::string, std::less<>> seen_;
};

// RoPE: transformers 5 reads rope_parameters (or the legacy rope_scaling, which
// takes priority), with rope_theta inside and a top-level rope_theta as the
// fallback; 4.x reads top-level rope_theta and rope_scaling. Only the default
// (unscaled) RoPE over the whole head is implemented; where the two spellings
// disagree the config is ambiguous and refused.
// partial_rotary_factor (top level, or inside the RoPE dict): only 1 is implemented.
void check_full_rotation(const json& v, const std::string& label, const std::string& field) {
  if (json_number(v, fmt::format("{}: field '{}'", label, field)) != 1.0)
    fail("{}: field '{}' = {} is not supported (mxrl rotates the whole head)", label, field, json_brief(v));
}

void read_rope(Fields& f, const std::string& label, double& theta) {
  const json* top_theta = f.find_non_null("rope_theta");
  const json* scaling = f.find("rope_scaling");
  const json* params = f.find("rope_parameters");
  if (scaling && scaling->is_null()) scaling = nullptr;
  if (params && params->is_null()) params = nullptr;
  if (scaling && params && *scaling != *params)
    fail(
        "{}: rope_scaling and rope_parameters disagree (transformers 5 would use rope_scaling, 4.x ignores "
        "rope_parameters); keep one",
        label);
  const json* rp = scaling ? scaling : params;
  const char* rp_name = scaling ? "rope_scaling" : "rope_parameters";
  if (rp && !rp->is_object()) fail("{}: field '{}' must be an object or null, got {}", label, rp_name, json_brief(*rp));
  const json* inner_theta = nullptr;
  if (rp) {
    for (const char* k : {"rope_type", "type"}) {  // the type first: it names what is unsupported
      if (!rp->contains(k)) continue;
      const std::string field = fmt::format("{}.{}", rp_name, k);
      const std::string& t = json_string((*rp)[k], fmt::format("{}: field '{}'", label, field));
      if (t != "default")
        fail("{}: field '{}' = \"{}\" is not supported (mxrl implements only the default, unscaled RoPE)", label, field,
             t);
    }
    for (auto it = rp->begin(); it != rp->end(); ++it) {
      const std::string& k = it.key();
      if (k == "rope_type" || k == "type") continue;
      const std::string field = fmt::format("{}.{}", rp_name, k);
      if (k == "rope_theta")
        inner_theta = &it.value();
      else if (k == "partial_rotary_factor")
        check_full_rotation(it.value(), label, field);
      else
        fail("{}: field '{}' is not supported (mxrl implements only the default, unscaled RoPE)", label, field);
    }
  }
  if (inner_theta) {
    theta = json_number(*inner_theta, fmt::format("{}: field '{}.rope_theta'", label, rp_name));
    if (top_theta && json_number(*top_theta, f.where("rope_theta")) != theta)
      fail("{}: rope_theta = {} and {}.rope_theta = {} disagree (transformers 4.x reads the first, 5.x the second)",
           label, json_brief(*top_theta), rp_name, json_brief(*inner_theta));
  } else if (top_theta) {
    theta = json_number(*top_theta, f.where("rope_theta"));
  }
  if (const json* p = f.find_non_null("partial_rotary_factor")) check_full_rotation(*p, label, "partial_rotary_factor");
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& label) {
  if (!j.is_object()) fail("{}: config is not a JSON object", label);
  Fields f(j, label);
  ModelConfig c;
  c.model_type = json_string(f.require("model_type"), f.where("model_type"));
  if (c.model_type != "qwen3" && c.model_type != "qwen3_moe")
    fail("{}: model_type {} is not supported (qwen3, qwen3_moe)", label, json_brief(nlohmann::json(c.model_type)));
  const bool moe = c.model_type == "qwen3_moe";

  // Shapes: required (transformers always writes them; its class defaults are Qwen3-8B's).
  f.integer("vocab_size", c.vocab_size, 1, kMaxDim, true);
  f.integer("hidden_size", c.hidden_size, 1, kMaxDim, true);
  f.integer("num_hidden_layers", c.num_hidden_layers, 1, kMaxDim, true);
  f.integer("num_attention_heads", c.num_attention_heads, 1, kMaxDim, true);
  if (const json* kv = f.find("num_key_value_heads"); kv && kv->is_null() && !moe)
    c.num_key_value_heads = c.num_attention_heads;  // Qwen3Config: "if num_key_value_heads is None"
  else
    f.integer("num_key_value_heads", c.num_key_value_heads, 1, kMaxDim, true);
  c.head_dim = moe ? c.hidden_size / c.num_attention_heads : 128;  // the one computed default (config.h)
  f.integer("head_dim", c.head_dim, 1, kMaxDim, false);
  f.integer("intermediate_size", c.intermediate_size, 1, kMaxDim, false);  // required below if a layer is dense
  f.integer("max_position_embeddings", c.max_position_embeddings, 1, kMaxDim, false);
  f.number("rms_norm_eps", c.rms_norm_eps);
  f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  read_rope(f, label, c.rope_theta);

  // What Qwen3 could be configured to do and mxrl does not implement.
  f.must_be("hidden_act", std::string("silu"), "mxrl's MLP is SwiGLU with SiLU");
  f.must_be("attention_bias", false, "Qwen3 projections have no biases");
  f.must_be("use_sliding_window", false, "mxrl implements full causal attention only");
  f.must_be("attention_dropout", 0.0, "mxrl does not implement dropout");
  f.must_be("pruned_heads", json::object(), "mxrl does not implement pruned attention heads");
  if (const json* q = f.find("quantization_config"); q && !q->is_null())
    fail(
        "{}: field 'quantization_config' is not supported (mxrl loads F32, BF16 or F16 weights and quantizes "
        "them itself)",
        label);
  if (const json* lt = f.find("layer_types"); lt && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c.num_hidden_layers)
      fail("{}: field 'layer_types' must list one type per layer ({} layers)", label, c.num_hidden_layers);
    for (size_t i = 0; i < lt->size(); ++i)
      if (json_string((*lt)[i], fmt::format("{}: field 'layer_types'[{}]", label, i)) != "full_attention")
        fail("{}: field 'layer_types'[{}] = {} is not supported (mxrl implements full causal attention only)", label, i,
             json_brief((*lt)[i]));
  }

  // Informational.
  const json* dtype5 = f.find("dtype");  // 5.x writes dtype, 4.x torch_dtype
  const json* dtype4 = f.find("torch_dtype");
  if (dtype5 && !dtype5->is_null())
    c.torch_dtype = json_string(*dtype5, f.where("dtype"));
  else if (dtype4 && !dtype4->is_null())
    c.torch_dtype = json_string(*dtype4, f.where("torch_dtype"));
  if (const json* b = f.find("bos_token_id"); b && !b->is_null())  // token ids may be null
    c.bos_token_id = json_integer(*b, 0, kMaxDim - 1, f.where("bos_token_id"));
  if (const json* e = f.find("eos_token_id"); e && !e->is_null())
    c.eos_token_ids = e->is_array() ? json_integers(*e, 0, kMaxDim - 1, f.where("eos_token_id"))
                                    : std::vector<int64_t>{json_integer(*e, 0, kMaxDim - 1, f.where("eos_token_id"))};

  if (moe) {
    const json* a = f.find_non_null("num_experts");
    const json* b = f.find_non_null("num_local_experts");
    if (!a && !b) fail("{}: missing field 'num_experts' (transformers 5: 'num_local_experts')", label);
    if (a) c.num_experts = json_integer(*a, 0, kMaxDim, f.where("num_experts"));
    if (b) {
      const int64_t n = json_integer(*b, 0, kMaxDim, f.where("num_local_experts"));
      if (a && n != c.num_experts)
        fail("{}: num_experts = {} and num_local_experts = {} disagree", label, c.num_experts, n);
      c.num_experts = n;
    }
    f.integer("num_experts_per_tok", c.num_experts_per_tok, 1, kMaxDim, true);
    f.integer("moe_intermediate_size", c.moe_intermediate_size, 1, kMaxDim, true);
    f.boolean("norm_topk_prob", c.norm_topk_prob);
    f.integer("decoder_sparse_step", c.decoder_sparse_step, 1, kMaxDim, false);
    if (const json* m = f.find("mlp_only_layers"); m && !m->is_null())
      c.mlp_only_layers = json_integers(*m, 0, kMaxDim, f.where("mlp_only_layers"));
    f.number("router_aux_loss_coef", c.router_aux_loss_coef);
  }
  f.refuse_unknown();
  if (c.intermediate_size == 0 && c.has_dense_layer())
    fail("{}: missing field 'intermediate_size' (a layer has a dense MLP)", label);
  c.validate(label);
  return c;
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(json_parse(ss.str(), path), path);
}

json ModelConfig::to_json() const {
  json j = {
      {"architectures", {model_type == "qwen3_moe" ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      // Both spellings, equal: 4.x reads rope_theta, 5.x rope_parameters.
      {"rope_theta", rope_theta},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", rope_theta}}},
      {"tie_word_embeddings", tie_word_embeddings},
      {"torch_dtype", torch_dtype},
      {"dtype", torch_dtype},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"use_cache", true},
  };
  if (intermediate_size > 0) j["intermediate_size"] = intermediate_size;  // unused when every layer is MoE
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) j["eos_token_id"] = eos_token_ids[0];
  if (eos_token_ids.size() > 1) j["eos_token_id"] = eos_token_ids;
  if (model_type == "qwen3_moe") {
    j["num_experts"] = num_experts;        // 4.x
    j["num_local_experts"] = num_experts;  // 5.x
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
