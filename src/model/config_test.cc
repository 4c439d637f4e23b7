#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {

nlohmann::json moe_json() {
  return {{"model_type", "qwen3_moe"},
          {"vocab_size", 128},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"num_experts", 4},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 32},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", {1}},
          {"norm_topk_prob", true}};
}

std::string error_of(const nlohmann::json& j) {
  return test::error_of([&] { ModelConfig::from_json(j, "cfg.json"); });
}

TEST(Config, ParsesMoeAndDecidesLayersLikeTransformers) {
  const ModelConfig c = ModelConfig::from_json(moe_json(), "cfg.json");
  EXPECT_TRUE(c.is_moe());
  EXPECT_TRUE(c.is_moe_layer(0));
  EXPECT_FALSE(c.is_moe_layer(1));  // mlp_only_layers
  EXPECT_TRUE(c.is_moe_layer(2));
  auto j = moe_json();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = nlohmann::json::array();
  const ModelConfig c2 = ModelConfig::from_json(j, "cfg.json");
  EXPECT_FALSE(c2.is_moe_layer(0));  // (0 + 1) % 2 != 0
  EXPECT_TRUE(c2.is_moe_layer(1));
  // to_json round-trips.
  const ModelConfig c3 = ModelConfig::from_json(c.to_json(), "again");
  EXPECT_EQ(c3.to_json(), c.to_json());
}

TEST(Config, ErrorsNameTheFileAndField) {
  auto j = moe_json();
  j.erase("hidden_size");
  EXPECT_EQ(error_of(j), "cfg.json: missing field 'hidden_size'");
  j = moe_json();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("multiple of num_key_value_heads"), std::string::npos);
  j = moe_json();
  j["vocab_size"] = "big";
  EXPECT_EQ(error_of(j), "cfg.json: field 'vocab_size': expected an integer, got \"big\" (string)");
  j = moe_json();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(j).find("exceeds num_experts"), std::string::npos);
  j = moe_json();
  j["model_type"] = "llama";
  EXPECT_EQ(error_of(j), "cfg.json: model_type \"llama\" is not supported (qwen3, qwen3_moe)");
  j = moe_json();
  j["mlp_only_layers"] = {7};
  EXPECT_NE(error_of(j).find("mlp_only_layers"), std::string::npos);
}

// Integers are never narrowed: floats, booleans, huge and negative values are refused by name.
TEST(Config, IntegerFieldsRefuseNonIntegersAndOutOfRange) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* phrase;
  };
  for (const Case& c :
       {Case{"hidden_size", 64.0, "field 'hidden_size': expected an integer, got 64.0"},
        Case{"hidden_size", 64.5, "field 'hidden_size': expected an integer, got 64.5"},
        Case{"num_hidden_layers", true, "field 'num_hidden_layers': expected an integer, got true"},
        Case{"vocab_size", uint64_t{1} << 40, "field 'vocab_size': 1099511627776 is out of range"},
        Case{"vocab_size", 0, "field 'vocab_size': 0 is out of range [1, "},
        Case{"head_dim", -32, "field 'head_dim': -32 is out of range"},
        Case{"num_experts_per_tok", "2", "field 'num_experts_per_tok': expected an integer"},
        Case{"decoder_sparse_step", 0, "field 'decoder_sparse_step': 0 is out of range"},
        Case{"mlp_only_layers", nlohmann::json::array({1.5}), "field 'mlp_only_layers'[0]: expected an integer"},
        Case{"eos_token_id", -1, "field 'eos_token_id': -1 is out of range"},
        Case{"eos_token_id", nlohmann::json::array({1, 2.5}), "field 'eos_token_id'[1]: expected an integer"},
        Case{"rms_norm_eps", "1e-6", "field 'rms_norm_eps': expected a number"},
        Case{"norm_topk_prob", 1, "field 'norm_topk_prob': expected true or false"},
        Case{"max_position_embeddings", nullptr, "field 'max_position_embeddings' is null"},
        Case{"head_dim", nullptr, "field 'head_dim' is null"}}) {
    auto j = moe_json();
    j[c.field] = c.value;
    EXPECT_NE(error_of(j).find(std::string("cfg.json: ") + c.phrase), std::string::npos)
        << c.field << " = " << c.value.dump() << ": " << error_of(j);
  }
}

// transformers 4.x and 5.x spellings of the same model read the same; where
// they would disagree, the config is refused.
TEST(Config, ReadsBothTransformersSpellings) {
  auto v4 = moe_json();  // 4.x: top-level rope_theta, rope_scaling null, num_experts, torch_dtype
  v4["rope_theta"] = 1e6;
  v4["rope_scaling"] = nullptr;
  v4["torch_dtype"] = "bfloat16";
  auto v5 = moe_json();  // 5.x: rope_parameters, num_local_experts, dtype
  v5.erase("num_experts");
  v5["num_local_experts"] = 4;
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  v5["dtype"] = "bfloat16";
  const ModelConfig a = ModelConfig::from_json(v4, "v4"), b = ModelConfig::from_json(v5, "v5");
  EXPECT_EQ(a.rope_theta, 1e6);
  EXPECT_EQ(b.rope_theta, 1e6);  // the bug of issue 9: this read 10000
  EXPECT_EQ(b.num_experts, 4);
  EXPECT_EQ(b.torch_dtype, "bfloat16");
  EXPECT_EQ(a.to_json(), b.to_json());
  // Legacy 'type' and rope_scaling with the default type; both spellings at once when they agree.
  auto j = moe_json();
  j["rope_scaling"] = {{"type", "default"}};
  j["rope_theta"] = 5e5;
  EXPECT_EQ(ModelConfig::from_json(j, "x").rope_theta, 5e5);
  j = v5;
  j["rope_theta"] = 1e6;
  j["num_experts"] = 4;
  EXPECT_EQ(ModelConfig::from_json(j, "x").to_json(), a.to_json());
  // Disagreements.
  j = v5;
  j["rope_theta"] = 1e4;
  EXPECT_NE(error_of(j).find("rope_theta = 10000.0 and rope_parameters.rope_theta = 1000000.0 disagree"),
            std::string::npos)
      << error_of(j);
  j = v5;
  j["num_experts"] = 8;
  EXPECT_NE(error_of(j).find("num_experts = 8 and num_local_experts = 4 disagree"), std::string::npos);
  j = v5;
  j["rope_scaling"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  EXPECT_NE(error_of(j).find("rope_scaling and rope_parameters disagree"), std::string::npos);
  j = v5;
  j.erase("num_local_experts");
  EXPECT_EQ(error_of(j), "cfg.json: missing field 'num_experts' (transformers 5: 'num_local_experts')");
}

// A config.json of the shape the Qwen3-0.6B release carries (written by transformers 4.51:
// torch_dtype, rope_scaling null, sliding-window keys that do not apply) loads as is.
TEST(Config, ReadsAReleaseStyleQwen3Config) {
  const auto j = nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  const ModelConfig c = ModelConfig::from_json(j, "Qwen3-0.6B/config.json");
  EXPECT_EQ(c.rope_theta, 1e6);  // an integer literal is a fine number
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.eos_token_id(), 151645);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_TRUE(c.tie_word_embeddings);
}

// What mxrl does not implement is refused by field name, never approximated.
TEST(Config, RefusesWhatItDoesNotImplement) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* phrase;
  };
  for (const Case& c :
       {Case{"rope_scaling",
             {{"rope_type", "yarn"}, {"factor", 4.0}},
             "field 'rope_scaling.rope_type' = \"yarn\" is not supported"},
        Case{"rope_scaling",
             {{"type", "linear"}, {"factor", 2.0}},
             "field 'rope_scaling.type' = \"linear\" is not supported"},
        Case{"rope_parameters",
             {{"rope_type", "dynamic"}, {"rope_theta", 1e4}},
             "field 'rope_parameters.rope_type' = \"dynamic\""},
        Case{"rope_parameters",
             {{"rope_type", "default"}, {"factor", 2.0}},
             "field 'rope_parameters.factor' is not supported"},
        Case{"rope_parameters",
             {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}},
             "field 'rope_parameters.partial_rotary_factor' = 0.5"},
        Case{"rope_parameters", "default", "field 'rope_parameters' must be an object or null"},
        Case{"partial_rotary_factor", 0.5, "field 'partial_rotary_factor' = 0.5 is not supported"},
        Case{"hidden_act", "gelu", "field 'hidden_act' = \"gelu\" is not supported"},
        Case{"attention_bias", true, "field 'attention_bias' = true is not supported"},
        Case{"use_sliding_window", true, "field 'use_sliding_window' = true is not supported"},
        Case{"attention_dropout", 0.1, "field 'attention_dropout' = 0.1 is not supported"},
        Case{"layer_types",
             {"full_attention", "sliding_attention", "full_attention", "full_attention"},
             "field 'layer_types'[1] = \"sliding_attention\""},
        Case{"layer_types", {"full_attention"}, "field 'layer_types' must list one type per layer (4 layers)"},
        Case{"quantization_config", {{"quant_method", "fp8"}}, "field 'quantization_config' is not supported"},
        Case{"pruned_heads", {{"0", {1}}}, "field 'pruned_heads' = {\"0\":[1]} is not supported"},
        Case{"mlp_bias", false, "unknown field \"mlp_bias\""},
        Case{"rope_parameterz", nullptr, "unknown field \"rope_parameterz\""}}) {
    auto j = moe_json();
    j[c.field] = c.value;
    EXPECT_NE(error_of(j).find(std::string("cfg.json: ") + c.phrase), std::string::npos)
        << c.field << ": " << error_of(j);
  }
  // The values that leave the math unchanged are accepted, as are inert keys.
  auto j = moe_json();
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0;
  j["layer_types"] = {"full_attention", "full_attention", "full_attention", "full_attention"};
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 1.0}};
  j["quantization_config"] = nullptr;
  j["pruned_heads"] = nlohmann::json::object();
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 28;
  j["initializer_range"] = 0.02;
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["transformers_version"] = "5.25.0";
  j["output_router_logits"] = true;
  j["eos_token_id"] = {151645, 151643};
  j["bos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  const ModelConfig c = ModelConfig::from_json(j, "cfg.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(c.bos_token_id, -1);
}

// A field left out takes transformers' own default, and only the listed ones do.
TEST(Config, DefaultsAreTransformersOwn) {
  const nlohmann::json dense = {{"model_type", "qwen3"},   {"vocab_size", 128},      {"hidden_size", 64},
                                {"intermediate_size", 96}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
                                {"num_key_value_heads", 2}};
  const ModelConfig d = ModelConfig::from_json(dense, "d");
  EXPECT_EQ(d.head_dim, 128);  // Qwen3Config.head_dim, not hidden / heads
  EXPECT_EQ(d.max_position_embeddings, 32768);
  EXPECT_EQ(d.rms_norm_eps, 1e-6);
  EXPECT_EQ(d.rope_theta, 10000.0);
  EXPECT_FALSE(d.tie_word_embeddings);
  EXPECT_TRUE(d.eos_token_ids.empty());
  auto null_kv = dense;
  null_kv["num_key_value_heads"] = nullptr;  // Qwen3Config: None means num_attention_heads
  EXPECT_EQ(ModelConfig::from_json(null_kv, "d").num_key_value_heads, 4);
  nlohmann::json moe = dense;
  moe["model_type"] = "qwen3_moe";
  moe["num_local_experts"] = 4;
  moe["num_experts_per_tok"] = 2;
  moe["moe_intermediate_size"] = 32;
  const ModelConfig m = ModelConfig::from_json(moe, "m");
  EXPECT_EQ(m.head_dim, 16);       // Qwen3MoeConfig has no head_dim: hidden / heads
  EXPECT_FALSE(m.norm_topk_prob);  // Qwen3MoeConfig's default (mxrl used to assume true)
  EXPECT_EQ(m.decoder_sparse_step, 1);
  EXPECT_TRUE(m.mlp_only_layers.empty());
  EXPECT_EQ(m.router_aux_loss_coef, 0.001);
  moe["num_key_value_heads"] = nullptr;  // Qwen3MoeConfig has no None rule
  EXPECT_EQ(error_of(moe), "cfg.json: field 'num_key_value_heads' is null");
  // Shape fields have no default.
  for (const char* key : {"model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "intermediate_size"}) {
    auto j = dense;
    j.erase(key);
    EXPECT_EQ(error_of(j).rfind(std::string("cfg.json: missing field '") + key + "'", 0), 0u) << error_of(j);
  }
  // The struct's own initializers are the same defaults (config.h lists them).
  const ModelConfig blank;
  EXPECT_EQ(blank.max_position_embeddings, d.max_position_embeddings);
  EXPECT_EQ(blank.rms_norm_eps, d.rms_norm_eps);
  EXPECT_EQ(blank.rope_theta, d.rope_theta);
  EXPECT_EQ(blank.tie_word_embeddings, d.tie_word_embeddings);
  EXPECT_EQ(blank.norm_topk_prob, m.norm_topk_prob);
  EXPECT_EQ(blank.decoder_sparse_step, m.decoder_sparse_step);
  EXPECT_EQ(blank.router_aux_loss_coef, m.router_aux_loss_coef);
}

}  // namespace
}  // namespace mxrl
