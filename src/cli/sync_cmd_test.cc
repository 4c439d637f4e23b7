// mxrl sync export / inspect, run as a user would: bundles written from a
// checkpoint verify and list; a corrupted bundle exits 1 with one line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/cli.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;
using test::run_mxrl;
using test::slurp;

class SyncCmd : public test::SmallModelTest {};

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST_F(SyncCmd, ExportShipAndInspect) {
  auto r = run_mxrl(dir_, "sync export --model " + path("model") +
                              " --recipe mxfp8 --sync ship --sampler-plan mxfp8-half --version 7 --threads 2 --out " +
                              path("b.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("ship bundle v7"), std::string::npos) << r.out;

  r = run_mxrl(dir_, "sync inspect " + path("b.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("mxrl.sync.bundle/1 v7, ship bundle, recipe mxfp8, plan mxfp8-half"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("model.layers.0.self_attn.q_proj.weight scales F8_E8M0 [64, 2] mxfp8(e4m3,rceil) 128 "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("model.layers.1.self_attn.q_proj.weight bf16 BF16 [64, 64] bf16 8192 "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("lm_head.weight (tied to model.embed_tokens.weight) bf16 BF16"), std::string::npos) << r.out;

  r = run_mxrl(dir_, "sync inspect --json " + path("b.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["version"], 7);
  EXPECT_EQ(j["sync"], "ship");
  EXPECT_EQ(j["config"]["hidden_size"], 64);
  // Per layer 4 attention + 3 MLP linears (layer 0 MX: 2 parts each, layer 1 BF16: 1), 5 norms per layer
  // and the final norm, the embedding, the tied head.
  EXPECT_EQ(j["manifest"].size(), 7u * 2 + 7 + 2 * 4 + 1 + 1 + 1);
}

TEST_F(SyncCmd, ExportRequantizeAndRefusals) {
  auto r = run_mxrl(dir_, "sync export --model " + path("model") + " --recipe mxfp8 --floor --sync requantize --out " +
                              path("r.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_mxrl(dir_, "sync inspect " + path("r.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("v0, requantize bundle, recipe mxfp8+floor, plan mxfp8+floor"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.mlp.down_proj.weight bf16 BF16 [64, 128] bf16"), std::string::npos) << r.out;

  r = run_mxrl(dir_, "sync export --model " + path("model") + " --recipe bf16 --sync ship --sampler-plan mxfp8 --out " +
                         path("x.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("requantize"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("x.safetensors")));
  r = run_mxrl(dir_, "sync export --model " + path("model") + " --sync requantize --sampler-plan bf16 --out " +
                         path("x.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("--sampler-plan applies only with --sync ship"), std::string::npos) << r.err;
  r = run_mxrl(dir_, "sync export --model " + path("model") + " --sync push --out " + path("x.safetensors"));
  EXPECT_EQ(r.rc, 2) << r.err;
}

TEST_F(SyncCmd, ACorruptedBundleExitsOneWithOneLine) {
  auto r = run_mxrl(dir_, "sync export --model " + path("model") + " --sync ship --out " + path("b.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string bytes = slurp(path("b.safetensors"));
  bytes[bytes.size() - 3] ^= 0x10;  // inside the tied head, last in the manifest
  std::ofstream(path("c.safetensors"), std::ios::binary) << bytes;
  r = run_mxrl(dir_, "sync inspect " + path("c.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  const std::string head = "'lm_head.weight (tied to model.embed_tokens.weight)' ['bf16']";
  EXPECT_NE(r.err.find("mxrl: error: " + path("c.safetensors") + ": " + head), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("xxh3"), std::string::npos) << r.err;
  r = run_mxrl(dir_, "sync inspect " + path("model/model.safetensors"));  // a checkpoint is no bundle
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("not an mxrl sync bundle"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mxrl
