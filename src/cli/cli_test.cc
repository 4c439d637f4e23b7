// End-to-end tests of the mxrl binary: quantize/dequantize round trips against
// the library, error handling (one line, non-zero exit, no output file), and
// the bench and demo commands.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include "testing/cli.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "interop/mx_file.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/score.h"
#include "numerics/mx.h"
#include "util/cpu.h"

namespace mxrl {
namespace {
namespace fs = std::filesystem;

using test::CmdResult;
using test::slurp;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mxrl_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CmdResult run(const std::string& args) { return test::run_mxrl(dir_, args); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // F32 [64, 64], BF16 [2, 3, 32], F16 [32, 96] with a wide spread of magnitudes.
  void write_input(const std::string& p) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0, 1);
    SafetensorsWriter w;
    auto vals = [&](int64_t n) {
      std::vector<float> v(n);
      for (auto& x : v) x = nd(rng) * std::exp2(float(rng() % 16) - 8);
      return v;
    };
    auto f32 = vals(64 * 64);
    std::vector<std::byte> b(f32.size() * 4);
    std::memcpy(b.data(), f32.data(), b.size());
    w.add("w.f32", DType::F32, {64, 64}, std::move(b));
    auto bf = vals(2 * 3 * 32);
    std::vector<std::byte> bb(bf.size() * 2);
    for (size_t i = 0; i < bf.size(); ++i) {
      const uint16_t h = f32_to_bf16(bf[i]);
      std::memcpy(&bb[2 * i], &h, 2);
    }
    w.add("w.bf16", DType::BF16, {2, 3, 32}, std::move(bb));
    auto hf = vals(32 * 96);
    std::vector<std::byte> hb(hf.size() * 2);
    for (size_t i = 0; i < hf.size(); ++i) {
      const uint16_t h = f32_to_f16(hf[i]);
      std::memcpy(&hb[2 * i], &h, 2);
    }
    w.add("w.f16", DType::F16, {32, 96}, std::move(hb));
    w.set_metadata({{"origin", "cli_test"}});
    w.write(p);
  }

  fs::path dir_;
};

InType in_type(DType d) { return d == DType::F32 ? InType::F32 : d == DType::BF16 ? InType::BF16 : InType::F16; }

TEST_F(Cli, HelpListsCommands) {
  const CmdResult r = run("--help");
  EXPECT_EQ(r.rc, 0);
  for (const char* c : {"quantize", "dequantize", "bench", "demo"}) EXPECT_NE(r.out.find(c), std::string::npos) << c;
  for (const char* c : {"quantize --help", "dequantize --help", "bench quantize --help", "demo --help"})
    EXPECT_EQ(run(c).rc, 0) << c;
}

TEST_F(Cli, QuantizeMatchesLibraryAndDequantizeRestoresNames) {
  write_input(path("in.safetensors"));
  for (const char* elem : {"e4m3", "e5m2", "e3m2", "e2m3", "e2m1"})
    for (const char* axis : {"row", "col"}) {
      SCOPED_TRACE(std::string(elem) + " " + axis);
      const bool col = std::string(axis) == "col";
      const std::string q = path("q.safetensors"), d = path("d.safetensors");
      fs::remove(q);
      const CmdResult r = run(fmt::format("quantize {} {} --elem {} --scale-rule floor --axis {} --threads 2",
                                          path("in.safetensors"), q, elem, axis));
      if (col) {  // w.bf16 is 3-D: col blocks need 2-D tensors
        EXPECT_EQ(r.rc, 1);
        EXPECT_NE(r.err.find("w.bf16"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(q));
        continue;
      }
      ASSERT_EQ(r.rc, 0) << r.err;
      const SafetensorsFile in = SafetensorsFile::open(path("in.safetensors"));
      const SafetensorsFile qf = SafetensorsFile::open(q);
      EXPECT_EQ(qf.metadata().at("mxrl.elem"), elem);
      EXPECT_EQ(qf.metadata().at("mxrl.scale_rule"), "floor");
      EXPECT_EQ(qf.metadata().at("origin"), "cli_test");
      const ElemType e = *elem_from_name(elem);
      for (const auto& t : in.tensors()) {
        const auto& c = qf.at(t.name);
        const auto& s = qf.at(t.name + "_scale");
        EXPECT_EQ(c.shape, t.shape);
        EXPECT_EQ(c.dtype, e == ElemType::E4M3 ? DType::F8_E4M3 : e == ElemType::E5M2 ? DType::F8_E5M2 : DType::U8);
        EXPECT_EQ(s.dtype, DType::F8_E8M0);
        auto ss = t.shape;
        ss.back() /= 32;
        EXPECT_EQ(s.shape, ss);
        const int64_t cols = t.shape.back(), rows = t.numel() / cols;
        std::vector<uint8_t> codes(rows * cols), scales(rows * cols / 32);
        mx_quantize(t.data.data(), in_type(t.dtype), rows, cols, {e, ScaleRule::Floor}, codes.data(), scales.data());
        EXPECT_EQ(0, std::memcmp(codes.data(), c.data.data(), codes.size()));
        EXPECT_EQ(0, std::memcmp(scales.data(), s.data.data(), scales.size()));
      }
      ASSERT_EQ(run(fmt::format("dequantize {} {}", q, d)).rc, 0);
      const SafetensorsFile df = SafetensorsFile::open(d);
      EXPECT_EQ(df.tensors().size(), in.tensors().size());
      EXPECT_EQ(df.metadata().count("mxrl.format"), 0u);
      for (const auto& t : in.tensors()) {
        const auto& y = df.at(t.name);
        EXPECT_EQ(y.dtype, DType::F32);
        EXPECT_EQ(y.shape, t.shape);
        const int64_t cols = t.shape.back(), rows = t.numel() / cols;
        std::vector<float> ref(rows * cols);
        mx_dequantize(reinterpret_cast<const uint8_t*>(qf.at(t.name).data.data()),
                      reinterpret_cast<const uint8_t*>(qf.at(t.name + "_scale").data.data()), rows, cols, e, Axis::Row,
                      ref.data());
        EXPECT_EQ(0, std::memcmp(ref.data(), y.data.data(), ref.size() * 4));
      }
    }
}

TEST_F(Cli, ColAxisScalesAreR32ByC) {
  SafetensorsWriter w;
  std::vector<float> v(64 * 40, 0.5f);
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  w.add("m", DType::F32, {64, 40}, std::move(b));
  w.write(path("in.safetensors"));
  ASSERT_EQ(run(fmt::format("quantize {} {} --elem e4m3 --scale-rule rceil --axis col", path("in.safetensors"),
                            path("q.safetensors")))
                .rc,
            0);
  const SafetensorsFile q = SafetensorsFile::open(path("q.safetensors"));
  EXPECT_EQ(q.at("m_scale").shape, (std::vector<int64_t>{2, 40}));
  ASSERT_EQ(run(fmt::format("dequantize {} {}", path("q.safetensors"), path("d.safetensors"))).rc, 0);
  const SafetensorsFile d = SafetensorsFile::open(path("d.safetensors"));
  float y0;
  std::memcpy(&y0, d.at("m").data.data(), 4);
  EXPECT_EQ(y0, 0.5f);
}

TEST_F(Cli, StochasticRoundingIsSeededAndThreadInvariant) {
  write_input(path("in.safetensors"));
  const std::string base = fmt::format("quantize {} ", path("in.safetensors"));
  const std::string flags = " --elem e4m3 --scale-rule rceil --round stochastic";
  ASSERT_EQ(run(base + path("a.safetensors") + flags + " --seed 7 --threads 1").rc, 0);
  ASSERT_EQ(run(base + path("b.safetensors") + flags + " --seed 7 --threads 3").rc, 0);
  ASSERT_EQ(run(base + path("c.safetensors") + flags + " --seed 8").rc, 0);
  EXPECT_EQ(slurp(path("a.safetensors")), slurp(path("b.safetensors")));
  EXPECT_NE(slurp(path("a.safetensors")), slurp(path("c.safetensors")));
}

TEST_F(Cli, ErrorsAreOneLineNonZeroAndLeaveNoOutput) {
  write_input(path("in.safetensors"));
  const std::string in = path("in.safetensors"), out = path("out.safetensors");
  struct Case {
    std::string args;
    int rc;
    std::string phrase;
  };
  const Case cases[] = {
      {fmt::format("quantize {} {} --elem e4m4 --scale-rule floor", in, out), 2, "--elem"},
      {fmt::format("quantize {} {} --elem e4m3", in, out), 2, "--scale-rule"},
      {fmt::format("quantize {} {} --elem e4m3 --scale-rule floor --bogus", in, out), 2, "bogus"},
      {fmt::format("quantize {} {} --elem e4m3 --scale-rule floor --seed 3", in, out), 2, "--round"},
      {fmt::format("quantize {} {} --elem e4m3 --scale-rule floor", path("missing.safetensors"), out), 2, "missing"},
      {fmt::format("dequantize {} {}", in, out), 1, "not an MX file"},
      {"frobnicate", 2, "frobnicate"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run(c.args);
    EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.phrase), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
  }
  // Unsupported dtype and a last dimension that is not a multiple of 32.
  for (auto [dtype, shape, phrase] : {std::tuple{DType::I32, std::vector<int64_t>{2, 32}, "dtype I32"},
                                      std::tuple{DType::F32, std::vector<int64_t>{4, 30}, "multiple of 32"}}) {
    SafetensorsWriter w;
    w.add("bad.tensor", dtype, shape, std::vector<std::byte>(shape[0] * shape[1] * 4));
    w.write(path("bad.safetensors"));
    const CmdResult r = run(fmt::format("quantize {} {} --elem e4m3 --scale-rule floor", path("bad.safetensors"), out));
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("bad.tensor"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  // A failed run never replaces an existing output.
  std::ofstream(out) << "keep";
  EXPECT_EQ(run(fmt::format("dequantize {} {}", in, out)).rc, 1);
  EXPECT_EQ(slurp(out), "keep");
}

// One version number: `mxrl --version` is CMakeLists.txt's project(mxrl VERSION ...),
// the line pyproject.toml takes the Python package's version from (python/tests
// check the installed package against this binary).
TEST_F(Cli, VersionIsTheProjectVersionThePythonPackageReads) {
  const CmdResult r = run("--version");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string cmake = slurp(std::string(MXRL_SOURCE_DIR) + "/CMakeLists.txt");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex(R"(project\(mxrl\s+VERSION\s+([0-9][0-9.]*))")));
  EXPECT_EQ(r.out, "mxrl " + m[1].str() + "\n");
  const std::string pyproject = slurp(std::string(MXRL_SOURCE_DIR) + "/pyproject.toml");
  EXPECT_NE(pyproject.find("dynamic = [\"version\"]"), std::string::npos);
  EXPECT_NE(pyproject.find("input = \"CMakeLists.txt\""), std::string::npos);
  EXPECT_FALSE(std::regex_search(pyproject, std::regex(R"(\n\s*version\s*=)"))) << "a second, static version";
}

// Every bench's provenance (bench_util.h): version, commit, CPU, ISA, kernels.
void expect_provenance(const nlohmann::json& j, bool gemm) {
  ASSERT_TRUE(j.contains("provenance")) << j.dump();
  const auto& p = j["provenance"];
  EXPECT_TRUE(std::regex_match(p["commit"].get<std::string>(), std::regex("[0-9a-f]{7,40}(-dirty)?|unknown")))
      << p["commit"];
  EXPECT_FALSE(p["cpu"].get<std::string>().empty());
  EXPECT_EQ(p["isa"]["avx2"], cpu_features().avx2);
  EXPECT_EQ(p["isa"]["avx512"], cpu_features().avx512);
  EXPECT_EQ(p["isa"]["avx512_bf16"], cpu_features().avx512_bf16);
  EXPECT_EQ(p["isa"]["avx512_vbmi"], cpu_features().avx512_vbmi);
  EXPECT_TRUE(p["isa"]["amx"].is_boolean());
  // MXRL_BACKEND in the test's environment caps it; without: the CPU's best.
  const char* env = std::getenv("MXRL_BACKEND");
  const std::string want = env && std::string(env) == "scalar" ? "scalar"
                           : cpu_features().avx512 && !(env && std::string(env) == "avx2")
                               ? "avx512"
                               : cpu_features().avx2 ? "avx2" : "scalar";
  EXPECT_EQ(p["kernels"]["backend"], want);
  EXPECT_EQ(p["kernels"].contains("pair_kernel"), gemm);
}

// The bench bodies (bench/) behind the CLI's options: --kernels is the
// bench's Exec::pair_kernel, named in its output; auto names its kernel per
// shape class, and MXRL_PAIR_KERNEL forces auto's.
TEST_F(Cli, BenchGemmQuickJsonNamesThePairKernel) {
  const CmdResult r = run("bench gemm --quick --json --min-time 0 --threads 1 --kernels fma");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  const auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j["pair_kernel"], "fma");
  EXPECT_EQ(j["results"].size(), 3u);
  expect_provenance(j, true);
  EXPECT_EQ(j["provenance"]["kernels"]["pair_kernel"]["requested"], "fma");
  EXPECT_EQ(run("bench gemm --quick --kernels nope").rc, 2);
  if (!cpu_features().avx512) return;
  for (const char* forced : {"", "fma"}) {
    if (*forced) ::setenv("MXRL_PAIR_KERNEL", forced, 1);
    const CmdResult a = run("bench gemm --quick --json --min-time 0 --threads 1");
    ::unsetenv("MXRL_PAIR_KERNEL");
    ASSERT_EQ(a.rc, 0) << a.err;
    const auto ja = nlohmann::json::parse(a.out.substr(a.out.rfind('\n', a.out.size() - 2) + 1));
    expect_provenance(ja, true);
    const auto& pk = ja["provenance"]["kernels"]["pair_kernel"];
    EXPECT_EQ(pk["requested"], "auto");
    ASSERT_EQ(pk["classes"].size(), 2u) << pk;
    for (const auto& c : pk["classes"]) {
      if (*forced)
        EXPECT_EQ(c["kernel"], forced) << pk;
      else
        EXPECT_TRUE(c["kernel"] == "fma" || (c["kernel"] == "dot" && cpu_features().avx512_bf16)) << pk;
    }
    EXPECT_EQ(pk["how"], *forced ? "MXRL_PAIR_KERNEL=fma" : pk["how"].get<std::string>());
  }
}

// --shape measures exactly the shapes asked for, grouped by weight; the FMA
// peak the figures are read against is in the output; a malformed or an
// MX-incompatible shape is one line.
TEST_F(Cli, BenchGemmShapesAndFmaPeak) {
  const CmdResult r = run("bench gemm --shape 3x64x96 --shape 1x32x64 --shape 2x64x96 --json --min-time 0 --threads 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1));
  std::vector<std::array<int64_t, 3>> got;
  for (const auto& row : j["results"]) got.push_back({row["m"], row["n"], row["k"]});
  const std::vector<std::array<int64_t, 3>> want = {{3, 64, 96}, {2, 64, 96}, {1, 32, 64}};
  EXPECT_EQ(got, want);
  const auto& pk = j["fma_peak"];
  EXPECT_EQ(pk["lanes"], cpu_features().avx512 ? 16 : cpu_features().avx2 ? 8 : 0);
  if (pk["lanes"] != 0) {
    EXPECT_GT(pk["gflops_one_thread"].get<double>(), 0.1);
    EXPECT_GT(pk["gflops_per_thread_all_at_once"].get<double>(), 0.1);
    EXPECT_EQ(pk["threads"], 1);
  }
  for (const char* bad : {"3x64", "3x64x", "0x64x64", "3xx64", "3x64x64x1", "-1x64x64", "ax64x64"}) {
    const CmdResult b = run(std::string("bench gemm --shape ") + bad);
    EXPECT_EQ(b.rc, 2) << bad;
    EXPECT_NE(b.err.find("is not MxNxK"), std::string::npos) << b.err;
    EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
  }
  const CmdResult k = run("bench gemm --shape 3x64x48");
  EXPECT_EQ(k.rc, 1);
  EXPECT_NE(k.err.find("multiple of 32"), std::string::npos) << k.err;
}

TEST_F(Cli, BenchQuantizeJson) {
  const CmdResult r = run("bench quantize --json --size-mib 2 --min-time 0 --threads 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  const auto j = nlohmann::json::parse(last);
  EXPECT_GT(j["memcpy_gbps"].get<double>(), 0);
  expect_provenance(j, false);
  const CmdResult t = run("bench quantize --size-mib 1 --min-time 0 --threads 1");  // the table's header
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find(", commit " + j["provenance"]["commit"].get<std::string>() + "; CPU "), std::string::npos)
      << t.out;
  EXPECT_NE(t.out.find("kernels: backend "), std::string::npos) << t.out;
  ASSERT_GE(j["results"].size(), 5u);
  for (const auto& x : j["results"]) EXPECT_GT(x["gbps_input"].get<double>(), 0) << x;
}

// bench decode's reference bandwidths: before and after the plans, and the
// read pass between decode steps, each decode figure put over both.
TEST_F(Cli, BenchDecodeJsonNamesItsReadBandwidths) {
  const CmdResult r =
      run("bench decode --shape tiny-dense --batch 1 --steps 2 --prompt-len 4 --prefill-reps 1 --threads 1 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1));
  expect_provenance(j, true);
  const double read = j["read_gbps"].get<double>();
  const auto& ba = j["read_gbps_before_after"];
  EXPECT_EQ(read, std::max(ba[0].get<double>(), ba[1].get<double>()));
  ASSERT_EQ(j["results"].size(), 2u);  // bf16 and mxfp8 at batch 1
  for (const auto& x : j["results"]) {
    const double gbps = x["decode_gbps"].get<double>(), inter = x["read_gbps_interleaved"].get<double>();
    EXPECT_GT(gbps, 0) << x;
    EXPECT_GT(inter, 0) << x;
    EXPECT_DOUBLE_EQ(x["decode_ratio_to_read"].get<double>(), gbps / read) << x;
    EXPECT_DOUBLE_EQ(x["decode_ratio_to_read_interleaved"].get<double>(), gbps / inter) << x;
  }
  // One read pass per decode step serves every plan at that batch.
  EXPECT_EQ(j["results"][0]["read_gbps_interleaved"], j["results"][1]["read_gbps_interleaved"]);
}

TEST_F(Cli, InitWritesALoadableCheckpointWithTokenizer) {
  for (const char* preset : {"tiny-dense", "tiny-moe"}) {
    const std::string dir = path(preset);
    const CmdResult r = run(fmt::format("init --preset {} --out {} --seed 3", preset, dir));
    ASSERT_EQ(r.rc, 0) << r.err;
    const Checkpoint ck = load_checkpoint(dir);
    EXPECT_EQ(ck.config.hidden_size, 256);
    EXPECT_EQ(ck.config.num_hidden_layers, 4);
    EXPECT_EQ(ck.config.is_moe(), std::string(preset) == "tiny-moe");
    EXPECT_FALSE(ck.tokenizer_json.empty());
    // Same seed, same weights; another seed, others.
    ASSERT_EQ(run(fmt::format("init --preset {} --out {} --seed 3", preset, path("again"))).rc, 0);
    EXPECT_EQ(load_checkpoint(path("again")).params.storage(), ck.params.storage());
    ASSERT_EQ(run(fmt::format("init --preset {} --out {} --seed 4", preset, path("again"))).rc, 0);
    EXPECT_NE(load_checkpoint(path("again")).params.storage(), ck.params.storage());
  }
  std::ofstream(path("m.toml")) << "model_type = \"qwen3_moe\"\nhidden_size = 64\nnum_hidden_layers = 2\n"
                                   "num_attention_heads = 2\nnum_key_value_heads = 1\nhead_dim = 32\n"
                                   "intermediate_size = 64\nnum_experts = 4\nnum_experts_per_tok = 2\n"
                                   "moe_intermediate_size = 32\nmlp_only_layers = [1]\n";
  ASSERT_EQ(run(fmt::format("init --config {} --out {}", path("m.toml"), path("toml"))).rc, 0);
  const Checkpoint t = load_checkpoint(path("toml"));
  EXPECT_TRUE(t.config.is_moe_layer(0));
  EXPECT_FALSE(t.config.is_moe_layer(1));
  const CmdResult both = run(fmt::format("init --preset tiny-dense --config {} --out {}", path("m.toml"), path("x")));
  EXPECT_EQ(both.rc, 1);
  EXPECT_NE(both.err.find("exactly one"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("x")));
}

TEST_F(Cli, ScoreIsPerSequenceBitwiseAndRoundTrips) {
  ASSERT_EQ(run(fmt::format("init --preset tiny-moe --out {} --seed 1 --init-std 0.1", path("m"))).rc, 0);
  std::mt19937 rng(4);
  std::vector<std::string> lines;
  for (int i = 0; i < 6; ++i) {
    const int len = 3 + static_cast<int>(rng() % 30);
    std::string toks;
    for (int t = 0; t < len; ++t) toks += fmt::format("{}{}", t ? "," : "", rng() % 80);
    lines.push_back(fmt::format("{{\"tokens\": [{}], \"prompt_len\": {}}}", toks, 1 + rng() % (len - 1)));
  }
  {
    std::ofstream f(path("all.jsonl"));
    for (const auto& l : lines) f << l << "\n";
  }
  for (const char* plan : {"fp32", "mxfp8", "mxfp8-half"}) {
    ASSERT_EQ(run(fmt::format("score --model {} --plan {} --in {} --out {} --batch-tokens 17", path("m"), plan,
                              path("all.jsonl"), path("all.out")))
                  .rc,
              0);
    std::istringstream all(slurp(path("all.out")));
    std::string got;
    for (size_t i = 0; i < lines.size(); ++i) {
      std::ofstream(path("one.jsonl")) << lines[i] << "\n";
      ASSERT_EQ(run(fmt::format("score --model {} --plan {} --in {} --out {} --threads 1", path("m"), plan,
                                path("one.jsonl"), path("one.out")))
                    .rc,
                0);
      std::getline(all, got);
      EXPECT_EQ(got + "\n", slurp(path("one.out"))) << plan << " line " << i;
    }
    // The printed numbers are the FP32 values, exactly.
    const Checkpoint ck = load_checkpoint(path("m"));
    const Model model(ck.params, PrecisionPlan::named(plan));
    const auto j = nlohmann::json::parse(lines[0]);
    const auto lp = score_sequences(model, {{j["tokens"].get<std::vector<int32_t>>(), j["prompt_len"].get<int64_t>()}});
    std::istringstream again(slurp(path("all.out")));
    std::getline(again, got);
    const auto printed = nlohmann::json::parse(got)["logprobs"];
    ASSERT_EQ(printed.size(), lp[0].size());
    for (size_t t = 0; t < lp[0].size(); ++t) EXPECT_EQ(std::strtof(printed[t].dump().c_str(), nullptr), lp[0][t]) << t;
  }
}

// Issue 9's acceptance: `mxrl score --plan fp32` on checkpoints saved, untouched,
// by transformers 5.25 and 4.57, dense and MoE, matches transformers' own
// log-probs (log_softmax of its FP32 logits) to 1e-4.
TEST_F(Cli, ScoreMatchesTransformersOnCheckpointsItSaved) {
  for (const char* name :
       {"qwen3-tiny-dense", "qwen3-tiny-moe", "qwen3-tiny-dense-bf16", "qwen3-tiny-dense-hf4", "qwen3-tiny-moe-hf4"}) {
    const std::string dir = std::string(MXRL_SOURCE_DIR) + "/tests/data/" + name;
    const SafetensorsFile ref = SafetensorsFile::open(dir + "/reference.safetensors");
    const auto& tok = ref.at("tokens");
    const auto& lg = ref.at("logits");
    const int64_t rows = tok.shape[0], len = tok.shape[1], vocab = lg.shape[2];
    std::vector<int32_t> tokens(tok.numel());
    std::vector<float> logits(lg.numel());
    std::memcpy(tokens.data(), tok.data.data(), tok.data.size());
    std::memcpy(logits.data(), lg.data.data(), lg.data.size());
    std::string in;
    for (int64_t r = 0; r < rows; ++r)
      in += nlohmann::json{{"tokens", std::vector<int32_t>(tokens.begin() + r * len, tokens.begin() + (r + 1) * len)},
                           {"prompt_len", 1}}
                .dump() +
            "\n";
    std::ofstream(path("fx.jsonl")) << in;
    const CmdResult r =
        run(fmt::format("score --model {} --plan fp32 --in {} --out {}", dir, path("fx.jsonl"), path("fx_out.jsonl")));
    ASSERT_EQ(r.rc, 0) << name << ": " << r.err;
    std::istringstream lines(test::slurp(path("fx_out.jsonl")));
    std::string line;
    double worst = 0;
    for (int64_t row = 0; std::getline(lines, line); ++row) {
      ASSERT_LT(row, rows) << name;
      const auto got = nlohmann::json::parse(line)["logprobs"];
      ASSERT_EQ(static_cast<int64_t>(got.size()), len - 1) << name;
      for (int64_t t = 0; t + 1 < len; ++t) {  // transformers: log_softmax(logits[t])[tokens[t + 1]], in FP64
        const float* l = logits.data() + (row * len + t) * vocab;
        double mx = l[0], sum = 0;
        for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, double(l[v]));
        for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(l[v]) - mx);
        const double want = double(l[tokens[row * len + t + 1]]) - mx - std::log(sum);
        worst = std::max(worst, std::fabs(got[t].get<double>() - want));
      }
    }
    EXPECT_LE(worst, 1e-4) << name;
    std::printf("%s: max |mxrl score - transformers| = %.3g nats\n", name, worst);
  }
}

TEST_F(Cli, ScoreErrorsNameTheLine) {
  ASSERT_EQ(run(fmt::format("init --preset tiny-dense --out {}", path("m"))).rc, 0);
  struct Case {
    std::string content, phrase;
  };
  const std::string ok = "{\"tokens\": [1, 2, 3], \"prompt_len\": 1}\n";
  const std::string in = path("in.jsonl");
  // Each bad line follows a good one and a blank line: the error names line 3 (lines count from 1).
  for (const Case& c :
       {Case{"{\"tokens\": [1,]}", ":3: not valid JSON"},
        Case{"{\"tokens\": [1, 2, 3], \"prompt_len\": 3}", ":3: \"prompt_len\": 3 is out of range [1, 2]"},
        Case{"{\"tokens\": [1, 2, 3], \"prompt_len\": 0}", ":3: \"prompt_len\": 0 is out of range [1, 2]"},
        Case{"{\"tokens\": [1, 2, 3], \"prompt_len\": 1.5}", ":3: \"prompt_len\": expected an integer, got 1.5"},
        Case{"{\"tokens\": [1, 2, 3], \"prompt_len\": \"1\"}", ":3: \"prompt_len\": expected an integer"},
        Case{"{\"tokens\": [1, 999]}", ":3: \"tokens\"[1]: token id 999 is outside the vocabulary"},
        // The narrowings of issue 9: 2^32 + 5 was scored as 5, 2^40 as 0, 2.5 as 2.
        Case{"{\"tokens\": [1, 4294967301]}", ":3: \"tokens\"[1]: token id 4294967301 is outside"},
        Case{"{\"tokens\": [1099511627776, 1]}", ":3: \"tokens\"[0]: token id 1099511627776 is outside"},
        Case{"{\"tokens\": [1, 2.5]}", ":3: \"tokens\"[1]: 2.5 is not a token id"},
        Case{"{\"tokens\": [1, -1]}", ":3: \"tokens\"[1]: token id -1 is outside"},
        Case{"{\"tokens\": [1]}", ":3: a sequence needs at least 2 tokens"},
        Case{"{\"tokens\": " + nlohmann::json(std::vector<int>(5000, 1)).dump() + "}",
             ":3: 5000 tokens exceed the model's max_position_embeddings"},
        Case{"{\"ids\": [1, 2]}", ":3: expected {\"tokens\""}}) {
    std::ofstream(in) << ok << "\n" << c.content << "\n" << ok;
    const CmdResult r = run(fmt::format("score --model {} --in {} --out {}", path("m"), in, path("o.jsonl")));
    EXPECT_EQ(r.rc, 1) << c.content;
    EXPECT_NE(r.err.find(in + c.phrase), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(path("o.jsonl")));
  }
  const CmdResult r =
      run(fmt::format("score --model {} --plan int3 --in {} --out {}", path("m"), path("in.jsonl"), path("o.jsonl")));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("unknown precision plan 'int3'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mxrl
