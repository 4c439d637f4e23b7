// mxrl sync dump / verify-sync / export, run as a user would: a vLLM-layout
// dump of a faulted sync fails under the fault's condition with its finding;
// a clean one passes; a compressed-tensors export scores exactly as the
// checkpoint under mxfp8 does.
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

class VerifySyncCmd : public test::SmallModelTest {};

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST_F(VerifySyncCmd, ASwapGateUpInAVllmDumpFailsPlacement) {
  auto r = run_mxrl(dir_, "sync dump --model " + model() + " --recipe mxfp8 --naming vllm --fault swap-gate-up --out " +
                              path("d.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.out,
                  "vllm dump of the sampler after ship sync v1 (recipe mxfp8), fault swap-gate-up; the in-process "
                  "checks failed placement"))
      << r.out;
  r = run_mxrl(dir_, "verify-sync --learner " + model() + " --recipe mxfp8 --sampler-dump " + path("d.safetensors") +
                         " --naming vllm");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.out, "  coverage    PASS\n  placement   FAIL\n")) << r.out;
  EXPECT_TRUE(
      has(r.out, "model.layers.0.mlp.gate_proj.weight [codes]: holds the bytes of model.layers.0.mlp.up_proj.weight"))
      << r.out;
  EXPECT_TRUE(has(r.out, "  grid        PASS\n  exceptions  PASS\n")) << r.out;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(has(r.err, "fails placement (4 findings)")) << r.err;
  r = run_mxrl(dir_, "verify-sync --json --learner " + model() + " --sampler-dump " + path("d.safetensors"));
  EXPECT_EQ(r.rc, 1);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["passed"].get<bool>());
  EXPECT_EQ(j["checks"][1]["name"], "placement");
  EXPECT_FALSE(j["checks"][1]["passed"].get<bool>());
  EXPECT_TRUE(j["checks"][0]["passed"].get<bool>());
}

TEST_F(VerifySyncCmd, CleanDumpsPassInBothNamings) {
  for (const char* naming : {"vllm", "mxrl"}) {
    auto r = run_mxrl(
        dir_, std::string("sync dump --model ") + model() + " --naming " + naming + " --out " + path("c.safetensors"));
    ASSERT_EQ(r.rc, 0) << r.err;
    r = run_mxrl(
        dir_, "verify-sync --learner " + model() + " --sampler-dump " + path("c.safetensors") + " --naming " + naming);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_EQ(count_lines(r.out), 5) << r.out;
    for (const char* c : {"coverage", "placement", "grid", "exceptions"}) EXPECT_TRUE(has(r.out, c)) << r.out;
    EXPECT_FALSE(has(r.out, "FAIL")) << r.out;
  }
  // An mxrl dump of this tied model read as vLLM's: its lm_head.weight is a tensor vLLM's layout lacks (extra).
  auto r = run_mxrl(dir_,
                    "verify-sync --learner " + model() + " --sampler-dump " + path("c.safetensors") + " --naming vllm");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.out, "  coverage    FAIL")) << r.out;
}

TEST_F(VerifySyncCmd, AStaleTensorIsCoverageGivenThePreviousDump) {
  auto r = run_mxrl(dir_, "init --config " + path("small.toml") + " --seed 5 --out " + path("v1"));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_mxrl(dir_, "sync dump --model " + path("v1") + " --previous-model " + model() +
                         " --fault drop-tensor --previous-out " + path("p.safetensors") + " --out " +
                         path("d.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_mxrl(dir_, "verify-sync --learner " + path("v1") + " --sampler-dump " + path("d.safetensors") +
                         " --previous-dump " + path("p.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.out,
                  "  coverage    FAIL\n    model.layers.0.self_attn.q_proj.weight [codes]: still holds the "
                  "previous version's bytes"))
      << r.out;
  EXPECT_TRUE(has(r.err, "fails coverage (2 findings)")) << r.err;
  // Without it the same tensor is bytes that differ (grid).
  r = run_mxrl(dir_, "verify-sync --learner " + path("v1") + " --sampler-dump " + path("d.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "fails grid (2 findings)")) << r.err;
}

TEST_F(VerifySyncCmd, RefusalsAndMalformedDumps) {
  auto r = run_mxrl(dir_, "sync dump --model " + model() + " --fault stale-plan --out " + path("x.safetensors"));
  EXPECT_EQ(r.rc, 2) << r.err;  // conditions 5-7 do not show in a dump
  r = run_mxrl(dir_, "sync dump --model " + model() + " --fault drop-experts --out " + path("x.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "needs a MoE model")) << r.err;
  std::ofstream(path("junk.safetensors")) << "junk";
  r = run_mxrl(dir_, "verify-sync --learner " + model() + " --sampler-dump " + path("junk.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(has(r.err, "mxrl: error: " + path("junk.safetensors") + ": ")) << r.err;
  r = run_mxrl(dir_,
               "verify-sync --learner " + model() + " --sampler-dump " + path("junk.safetensors") + " --naming sglang");
  EXPECT_EQ(r.rc, 2);
  r = run_mxrl(dir_, "verify-sync --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(has(r.out, "coverage, placement, grid, exceptions")) << r.out;
  EXPECT_TRUE(has(r.out, "--previous-dump")) << r.out;
}

TEST_F(VerifySyncCmd, ACompressedTensorsExportScoresAsTheCheckpointUnderMxfp8) {
  auto r =
      run_mxrl(dir_, "export --model " + model() + " --recipe mxfp8 --format compressed-tensors --out " + path("ct"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.out, "14 MXFP8 linears")) << r.out;
  const nlohmann::json cfg = nlohmann::json::parse(slurp(path("ct/config.json")));
  EXPECT_EQ(cfg["quantization_config"]["quant_method"], "compressed-tensors");
  std::ofstream(path("in.jsonl")) << "{\"tokens\": [1, 5, 9, 13, 2, 7], \"prompt_len\": 2}\n{\"tokens\": [3, 4, 40]}\n";
  for (const char* m : {"model", "ct"}) {
    r = run_mxrl(dir_, "score --model " + path(m) + " --plan mxfp8 --in " + path("in.jsonl") + " --out " +
                           path(std::string(m) + ".jsonl"));
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  EXPECT_EQ(slurp(path("model.jsonl")), slurp(path("ct.jsonl")));
  std::ofstream(path("p.jsonl")) << "{\"tokens\": [1, 5, 9]}\n";
  for (const char* m : {"model", "ct"}) {
    r = run_mxrl(dir_, "generate --model " + path(m) + " --plan mxfp8 --prompts " + path("p.jsonl") +
                           " --max-new-tokens 6 --temperature 0 --out " + path(std::string("g") + m + ".jsonl"));
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  EXPECT_EQ(slurp(path("gmodel.jsonl")), slurp(path("gct.jsonl")));
  // Back to a trainable checkpoint: the exact values computed with, which quantize back to the same values.
  r = run_mxrl(dir_, "init --from " + path("ct") + " --out " + path("back") + " --dtype f32");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(has(r.err, "compressed-tensors mxfp8, dequantized exactly")) << r.err;
  r = run_mxrl(dir_, "score --model " + path("back") + " --plan mxfp8 --in " + path("in.jsonl") + " --out " +
                         path("back.jsonl"));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(slurp(path("back.jsonl")), slurp(path("ct.jsonl")));
  r = run_mxrl(dir_, "init --from " + path("ct") + " --preset tiny-dense --out " + path("x"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "give exactly one of --preset, --config or --from")) << r.err;
  r = run_mxrl(dir_,
               "score --model " + path("ct") + " --plan bf16 --in " + path("in.jsonl") + " --out " + path("x.jsonl"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(has(r.err, "is held as mxfp8(e4m3), but plan bf16 computes it as bf16")) << r.err;
  r = run_mxrl(dir_, "export --model " + model() + " --format gguf --out " + path("g"));
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run_mxrl(dir_,
               "export --model " + model() + " --recipe mxfp8-half --format compressed-tensors --out " + path("h"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "model.layers.1.self_attn.q_proj.weight is bf16 under plan mxfp8-half")) << r.err;
  EXPECT_FALSE(fs::exists(path("h")));
}

}  // namespace
}  // namespace mxrl
