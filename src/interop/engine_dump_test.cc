// Engine weight dumps (interop/engine_dump.h): what a sampler computes with,
// written in mxrl's and vLLM's layouts, read back to the same manifest, and
// verified under conditions 1-4. (A dump of the sampler after a faulted sync:
// faults/dump_faults_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interop/engine_dump.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "sync/sync.h"
#include "testing/errors.h"
#include "testing/small_config.h"
#include "testing/synced_sampler.h"
#include "util/error.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;
using namespace test;  // testing/synced_sampler.h

std::string tmp(const std::string& name) {
  return (fs::temp_directory_path() / fmt::format("mxrl_engine_dump_{}_{}", ::getpid(), name)).string();
}

TEST(EngineDump, NamingNamesRoundTripAndUnknownIsRefusedListingBoth) {
  for (Naming n : {Naming::Mxrl, Naming::Vllm}) EXPECT_EQ(parse_naming(naming_name(n)), n);
  try {
    parse_naming("sglang");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(mxrl, vllm)"), std::string::npos) << e.what();
  }
}

TEST(EngineDump, ACleanDumpReadsBackToTheSamplersManifestAndPassesAllFour) {
  for (bool moe : {false, true})
    for (Naming n : {Naming::Mxrl, Naming::Vllm}) {
      SCOPED_TRACE(fmt::format("{} {}", moe ? "moe" : "dense", naming_name(n)));
      Synced s = synced(moe, {});
      ASSERT_TRUE(s.report.passed()) << fmt::format("{}", fmt::join(s.report.findings(), "\n"));
      const std::string path = tmp(fmt::format("clean_{}_{}.safetensors", moe, naming_name(n)));
      write_dump(s.engine.model(), n, path);
      EXPECT_EQ(read_dump_manifest(path, config(moe), plan(moe), n), model_digests(s.engine.model()));
      const auto r = verify_dump(s.masters1, plan(moe), path, n);
      ASSERT_EQ(r.size(), 4u);
      EXPECT_TRUE(failed(r).empty()) << all_findings(r);
      fs::remove(path);
    }
}

TEST(EngineDump, TheVllmLayoutIsFusedAsVllmHoldsIt) {
  for (bool moe : {false, true}) {
    Synced s = synced(moe, {});
    const std::string path = tmp(fmt::format("layout_{}.safetensors", moe));
    write_dump(s.engine.model(), Naming::Vllm, path);
    const SafetensorsFile f = SafetensorsFile::open(path);
    const ModelConfig c = config(moe);
    auto shape = [&](const std::string& name) { return f.at(name).shape; };
    // q (heads x 32) + k + v (kv heads x 32) rows, hidden 64 columns; one U8 scale per 32.
    const int64_t qkv = c.q_dim() + 2 * c.kv_dim();
    EXPECT_EQ(shape("model.layers.0.self_attn.qkv_proj.weight"), (std::vector<int64_t>{qkv, 64}));
    EXPECT_EQ(f.at("model.layers.0.self_attn.qkv_proj.weight").dtype, DType::F8_E4M3);
    EXPECT_EQ(shape("model.layers.0.self_attn.qkv_proj.weight_scale"), (std::vector<int64_t>{qkv, 2}));
    EXPECT_EQ(f.at("model.layers.0.self_attn.qkv_proj.weight_scale").dtype, DType::U8);
    EXPECT_EQ(f.find("model.layers.0.self_attn.q_proj.weight"), nullptr);
    EXPECT_NE(f.find("model.layers.0.self_attn.o_proj.weight_scale"), nullptr);
    EXPECT_EQ(shape("model.layers.1.mlp.gate_up_proj.weight"), (std::vector<int64_t>{2 * c.intermediate_size, 64}));
    if (moe) {
      EXPECT_EQ(shape("model.layers.0.mlp.experts.w13_weight"), (std::vector<int64_t>{4, 64, 64}));
      EXPECT_EQ(shape("model.layers.0.mlp.experts.w13_weight_scale"), (std::vector<int64_t>{4, 64, 2}));
      EXPECT_EQ(shape("model.layers.0.mlp.experts.w2_weight"), (std::vector<int64_t>{4, 64, 32}));
      EXPECT_EQ(shape("model.layers.0.mlp.experts.w2_weight_scale"), (std::vector<int64_t>{4, 64, 1}));
      EXPECT_EQ(f.at("model.layers.0.mlp.gate.weight").dtype, DType::F32);  // the FP32 router
      EXPECT_EQ(f.at("lm_head.weight").dtype, DType::BF16);
      // Expert 1's up rows sit after its gate rows: bytes 32 rows into expert 1's slab.
      const auto& w13 = f.at("model.layers.0.mlp.experts.w13_weight");
      const PreparedLinear* up1 = s.engine.model().find_linear("model.layers.0.mlp.experts.1.up_proj.weight");
      ASSERT_NE(up1, nullptr);
      EXPECT_EQ(std::memcmp(w13.data.data() + (64 + 32) * 64, up1->codes.data(), up1->codes.size()), 0);
    } else {
      EXPECT_EQ(f.find("lm_head.weight"), nullptr);  // tied: vLLM's lm_head is embed_tokens
    }
    fs::remove(path);
  }
}

TEST(EngineDump, MalformedDumpsGiveOneLineNamingTheFile) {
  const ModelConfig c = config(false);
  auto error_of = [&](const std::string& path, Naming n) {
    return test::error_of([&] { read_dump_manifest(path, c, plan(false), n); });
  };
  const std::string junk = tmp("junk.safetensors");
  std::ofstream(junk) << "not a safetensors file at all";
  for (Naming n : {Naming::Mxrl, Naming::Vllm}) {
    const std::string e = error_of(junk, n);
    EXPECT_EQ(e.rfind(junk + ": ", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_EQ(error_of(tmp("missing.safetensors"), Naming::Vllm).rfind(tmp("missing.safetensors"), 0), 0u);
  // A fused q/k/v with rows the config cannot split.
  const std::string bad = tmp("bad_qkv.safetensors");
  SafetensorsWriter w;
  w.add("model.layers.0.self_attn.qkv_proj.weight", DType::BF16, {100, 64}, std::vector<std::byte>(100 * 64 * 2));
  w.write(bad);
  const std::string e = error_of(bad, Naming::Vllm);
  EXPECT_EQ(e, bad +
                   ": model.layers.0.self_attn.qkv_proj.weight: shape [100, 64] cannot be split into the config's "
                   "128 rows (64 + 32 + 32)");
  // Stacked experts of the wrong count.
  const ModelConfig cm = config(true);
  SafetensorsWriter we;
  we.add("model.layers.0.mlp.experts.w2_weight", DType::BF16, {3, 64, 32}, std::vector<std::byte>(3 * 64 * 32 * 2));
  we.write(bad);
  try {
    read_dump_manifest(bad, cm, plan(true), Naming::Vllm);
    FAIL();
  } catch (const Error& x) {
    EXPECT_EQ(std::string(x.what()), bad +
                                         ": model.layers.0.mlp.experts.w2_weight: shape [3, 64, 32] holds 3 experts, "
                                         "the config 4");
  }
  // Unknown names come back as they are: extra coverage findings.
  Synced s = synced(false, {});
  const std::string extra = tmp("extra.safetensors");
  write_dump(s.engine.model(), Naming::Vllm, extra);
  {
    SafetensorsFile f = SafetensorsFile::open(extra);
    SafetensorsWriter x;
    for (const TensorView& t : f.tensors()) x.add_view(t.name, t.dtype, t.shape, t.data);
    x.add("model.layers.0.self_attn.rotary_emb.inv_freq", DType::F32, {16}, std::vector<std::byte>(64));
    x.write(extra + ".2");
  }
  const auto r = verify_dump(s.masters1, plan(false), extra + ".2", Naming::Vllm);
  EXPECT_EQ(failed(r), std::set<std::string>{"coverage"}) << all_findings(r);
  EXPECT_TRUE(mentions(r, "coverage", "extra model.layers.0.self_attn.rotary_emb.inv_freq")) << all_findings(r);
  for (const std::string& p : {junk, bad, extra, extra + ".2"}) fs::remove(p);
}

}  // namespace
}  // namespace mxrl
