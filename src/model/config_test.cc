#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace mxrl {
namespace {

nlohmann::json moe_json() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 128}, {"hidden_size", 64}, {"intermediate_size", 96},
          {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 32},
          {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
          {"decoder_sparse_step", 1}, {"mlp_only_layers", {1}}, {"norm_topk_prob", true}};
}

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
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
  EXPECT_NE(error_of(j).find("cfg.json: missing field 'hidden_size'"), std::string::npos);
  j = moe_json();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("multiple of num_key_value_heads"), std::string::npos);
  j = moe_json();
  j["vocab_size"] = "big";
  EXPECT_NE(error_of(j).find("'vocab_size' has the wrong type"), std::string::npos);
  j = moe_json();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(j).find("exceeds num_experts"), std::string::npos);
  j = moe_json();
  j["model_type"] = "llama";
  EXPECT_NE(error_of(j).find("not supported"), std::string::npos);
  j = moe_json();
  j["rope_scaling"] = {{"type", "yarn"}};
  EXPECT_NE(error_of(j).find("rope_scaling"), std::string::npos);
  j = moe_json();
  j["mlp_only_layers"] = {7};
  EXPECT_NE(error_of(j).find("mlp_only_layers"), std::string::npos);
}

}  // namespace
}  // namespace mxrl
