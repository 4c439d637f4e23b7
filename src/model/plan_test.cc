#include "model/plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/errors.h"
#include "util/error.h"

namespace mxrl {
namespace {

TEST(Plan, NamedPlans) {
  const auto mx = PrecisionPlan::named("mxfp8");
  EXPECT_EQ(mx.for_linear(LinearKind::Q, 0, -1), (LinearPrecision{Precision::MXFP8, ElemType::E4M3, ScaleRule::RCeil}));
  EXPECT_EQ(mx.for_linear(LinearKind::Down, 3, 5).precision, Precision::MXFP8);
  EXPECT_EQ(mx.for_linear(LinearKind::Router, 0, -1).precision, Precision::BF16);
  EXPECT_EQ(mx.for_linear(LinearKind::LmHead, -1, -1).precision, Precision::BF16);
  EXPECT_TRUE(mx.bf16_embeddings);
  const auto half = PrecisionPlan::named("mxfp8-half");
  EXPECT_EQ(half.for_linear(LinearKind::Q, 0, -1).precision, Precision::MXFP8);
  EXPECT_EQ(half.for_linear(LinearKind::Q, 1, -1).precision, Precision::BF16);
  EXPECT_EQ(half.for_linear(LinearKind::Up, 2, 3).precision, Precision::MXFP8);
  EXPECT_EQ(half.for_linear(LinearKind::Up, 27, 3).precision, Precision::BF16);
  EXPECT_EQ(PrecisionPlan::named("mxfp8-floor").decoder.rule, ScaleRule::Floor);
  const auto f = PrecisionPlan::named("fp32");
  EXPECT_EQ(f.for_linear(LinearKind::LmHead, -1, -1).precision, Precision::FP32);
  EXPECT_FALSE(f.bf16_embeddings);
  EXPECT_EQ(PrecisionPlan::named("fp8-block128").decoder.precision, Precision::FP8Block128);
  EXPECT_EQ(PrecisionPlan::named("fp8-tensor").decoder.precision, Precision::FP8Tensor);
  for (const auto& n : PrecisionPlan::names()) {
    EXPECT_EQ(PrecisionPlan::named(n).name, n);
    EXPECT_FALSE(PrecisionPlan::named(n).fp8_kv_cache);
    const auto kv = PrecisionPlan::resolve(n + "+fp8kv");
    EXPECT_TRUE(kv.fp8_kv_cache);
    EXPECT_EQ(kv.decoder, PrecisionPlan::named(n).decoder);
  }
  try {
    PrecisionPlan::named("int4");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mxfp8-half"), std::string::npos);
  }
}

class PlanToml : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() / ("plan_" + std::to_string(::getpid()) + ".toml")).string();
    std::ofstream(path_) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string error_of(const std::string& text) {
    return test::error_of([&] { PrecisionPlan::load_toml(write(text)); });
  }
  std::string path_;
};

TEST_F(PlanToml, OverridesApplyInOrder) {
  const auto p = PrecisionPlan::resolve(write(R"(
name = "mixed"
default = "mxfp8"
kv_cache = "fp8"
scale_rule = "floor"
lm_head = "fp32"
[[override]]
layers = [0]
precision = "bf16"
[[override]]
layers = [0]
linears = ["q"]
precision = "mxfp8"
elem = "e5m2"
[[override]]
linears = ["down"]
experts = [1]
precision = "fp8-block128"
)"));
  EXPECT_EQ(p.name, "mixed");
  EXPECT_TRUE(p.fp8_kv_cache);
  EXPECT_EQ(p.for_linear(LinearKind::K, 0, -1).precision, Precision::BF16);
  EXPECT_EQ(p.for_linear(LinearKind::Q, 0, -1), (LinearPrecision{Precision::MXFP8, ElemType::E5M2, ScaleRule::Floor}));
  EXPECT_EQ(p.for_linear(LinearKind::K, 1, -1), (LinearPrecision{Precision::MXFP8, ElemType::E4M3, ScaleRule::Floor}));
  EXPECT_EQ(p.for_linear(LinearKind::Down, 2, 1).precision, Precision::FP8Block128);
  EXPECT_EQ(p.for_linear(LinearKind::Down, 2, 0).precision, Precision::MXFP8);
  EXPECT_EQ(p.for_linear(LinearKind::LmHead, -1, -1).precision, Precision::FP32);
  EXPECT_EQ(p.for_linear(LinearKind::Router, 0, -1).precision, Precision::BF16);
}

TEST_F(PlanToml, ErrorsNameTheFile) {
  EXPECT_NE(error_of("default = \"mxfp9\"").find("unknown precision 'mxfp9'"), std::string::npos);
  EXPECT_NE(error_of("name = \"x\"").find("missing 'default'"), std::string::npos);
  EXPECT_NE(error_of("default = \"bf16\"\ncolour = 1").find("unknown key 'colour'"), std::string::npos);
  EXPECT_NE(error_of("default = \"bf16\"\n[[override]]\nlinears = [\"qkv\"]\nprecision = \"fp32\"")
                .find("unknown linear 'qkv'"),
            std::string::npos);
  EXPECT_NE(error_of("default = [").find("invalid TOML"), std::string::npos);
  EXPECT_EQ(error_of("default = \"bf16\""), "");  // and a valid file passes
  EXPECT_NE(error_of("default = \"mxfp8\"\nscale_rule = \"ceil\"").find(path_), std::string::npos);
  // Layer and expert lists hold integers: 1.0 and 1.5 are not layer 1.
  for (const char* list : {"[1.0]", "[1.5]", "[-1]", "[\"1\"]", "[4294967297]"})
    EXPECT_NE(error_of(std::string("default = \"bf16\"\n[[override]]\nlayers = ") + list + "\nprecision = \"fp32\"")
                  .find("'layers' must hold non-negative integers"),
              std::string::npos)
        << list;
}

}  // namespace
}  // namespace mxrl
