// compressed-tensors MXFP8 export and load: the exported model computes
// exactly what the on-grid sampler computes (log-probs bit for bit, the same
// manifest); a plan that disagrees with what is held is refused in one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "interop/compressed_tensors.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/digest.h"
#include "model/init.h"
#include "model/score.h"
#include "sync/bundle.h"
#include "testing/errors.h"
#include "testing/small_config.h"
#include "util/error.h"

namespace mxrl {
namespace {

using test::error_of;

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  return (fs::temp_directory_path() / ("mxrl_ct_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

ParamTable params(bool moe) {
  ParamTable p(small_test_config(moe));
  init_params(p, 3);
  return p;
}

std::vector<ScoreRequest> requests() { return {{{1, 5, 9, 13, 2, 7, 40, 41}, 2}, {{3, 4, 40, 41, 90}, 1}}; }

TEST(CompressedTensors, ExportedModelLoadsBackToTheOnGridSamplerBitForBit) {
  for (bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "moe" : "dense");
    const ParamTable masters = params(moe);
    const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
    const Model learner(masters, plan);
    // The on-grid sampler: built from a ship bundle of the learner's own weights.
    const Bundle b = make_ship_bundle(learner, masters, plan, 1);
    const Model sampler = Model::from_shipment(masters.config(), plan, bundle_to_shipment(b, masters.config()));
    const std::string dir = tmp(moe ? "moe" : "dense");
    export_compressed_tensors(learner, "{\"tok\": 1}", "{}", dir);
    EXPECT_TRUE(is_compressed_tensors(dir));
    const Model loaded = load_model(dir, plan);
    EXPECT_EQ(model_digests(loaded), model_digests(sampler));
    const auto a = score_sequences(loaded, requests()), e = score_sequences(sampler, requests());
    ASSERT_EQ(a.size(), e.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].size(), e[i].size());
      EXPECT_EQ(std::memcmp(a[i].data(), e[i].data(), a[i].size() * sizeof(float)), 0) << i;
    }
    EXPECT_EQ(load_tokenizer_files(dir).tokenizer_json, "{\"tok\": 1}");
    // The layout vLLM loads.
    const SafetensorsFile f = SafetensorsFile::open(dir + "/model.safetensors");
    EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight").dtype, DType::F8_E4M3);
    EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight_scale").dtype, DType::U8);
    EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight_scale").shape, (std::vector<int64_t>{128, 2}));
    EXPECT_EQ(f.at("model.embed_tokens.weight").dtype, DType::BF16);
    EXPECT_EQ(f.find("lm_head.weight") != nullptr, moe);  // the dense test model is tied: HF writes no lm_head
    if (moe) {
      EXPECT_EQ(f.at("model.layers.0.mlp.gate.weight").dtype, DType::BF16);
    }
    EXPECT_EQ(f.metadata().at("mxrl.plan"), "mxfp8");
    std::ifstream cs(dir + "/config.json");
    const nlohmann::json cj = nlohmann::json::parse(cs);
    EXPECT_EQ(cj["quantization_config"]["format"], "mxfp8-quantized");
    EXPECT_EQ(cj["quantization_config"]["config_groups"]["group_0"]["weights"]["scale_dtype"], "torch.uint8");
    // A plan that computes a held tensor in another precision is refused, in one line.
    const std::string e1 = error_of([&] { load_model(dir, PrecisionPlan::named("bf16")); });
    EXPECT_NE(
        e1.find("model.layers.0.self_attn.q_proj.weight is held as mxfp8(e4m3), but plan bf16 computes it as bf16"),
        std::string::npos)
        << e1;
    EXPECT_EQ(e1.find('\n'), std::string::npos);
    fs::remove_all(dir);
  }
}

TEST(CompressedTensors, APlanOutsideTheFormatIsRefusedNamingTheTensor) {
  const ParamTable masters = params(false);
  const std::string dir = tmp("refused");
  const std::string e =
      error_of([&] { export_compressed_tensors(Model(masters, PrecisionPlan::named("mxfp8-half")), "", "", dir); });
  EXPECT_NE(e.find("model.layers.1.self_attn.q_proj.weight is bf16 under plan mxfp8-half"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_NE(error_of([&] {
              export_compressed_tensors(Model(masters, PrecisionPlan::named("fp32")), "", "", dir);
            }).find("fp32"),
            std::string::npos);
}

TEST(CompressedTensors, APlainCheckpointLoadsThroughLoadModel) {
  const ParamTable masters = params(false);
  const std::string dir = tmp("plain");
  save_checkpoint(dir, masters.config(), masters, DType::F32);
  EXPECT_FALSE(is_compressed_tensors(dir));
  const PrecisionPlan plan = PrecisionPlan::named("mxfp8");
  EXPECT_EQ(model_digests(load_model(dir, plan)), model_digests(Model(masters, plan)));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mxrl
