#include "learner/train_state.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "io/safetensors.h"
#include "learner/optimizer.h"
#include "model/checkpoint.h"
#include "testing/errors.h"
#include "testing/files.h"
#include "testing/small_config.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace mxrl {
namespace {

using test::entries;
using test::error_of;
using test::slurp;

namespace fs = std::filesystem;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void fill_random(std::vector<float>& x, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  for (float& f : x) f = nd(rng);
  // Values whose bits must survive: -0, a denormal, a NaN with a payload, infinity.
  x[0] = -0.0f;
  x[1] = from_bits(0x00000001u);
  x[2] = from_bits(0x7fc12345u);
  x[3] = -INFINITY;
}

TrainState make_state(bool moe, uint32_t seed) {
  const ModelConfig cfg = small_test_config(moe);
  TrainState s{cfg, ParamTable(cfg), {}, {}, 0, nlohmann::json::object(), {}, {}};
  fill_random(s.params.storage(), seed);
  s.m.resize(s.params.numel());
  s.v.resize(s.params.numel());
  fill_random(s.m, seed + 1);
  fill_random(s.v, seed + 2);
  s.step = 1234567890123;
  s.meta = nlohmann::json::parse(R"({
    "run": {"lr": 0.30000000000000004, "name": "grpo \u00e9", "tasks": ["add", "sort"]},
    "data": {"epoch": 3, "position": 98765},
    "rng": [18446744073709551615, 0, 42],
    "neg": -7, "flag": true, "none": null})");
  s.tokenizer_json = "{\"model\": {\"type\": \"BPE\"}}\n\x01 bytes";
  s.tokenizer_config_json = "{\"eos_token\": \"<|im_end|>\"}";
  return s;
}

void spit(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
}

void expect_same(const TrainState& a, const TrainState& b) {
  EXPECT_EQ(a.config.to_json(), b.config.to_json());
  EXPECT_TRUE(bitwise_equal(a.params.storage(), b.params.storage()));
  EXPECT_TRUE(bitwise_equal(a.m, b.m));
  EXPECT_TRUE(bitwise_equal(a.v, b.v));
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.meta, b.meta);
  EXPECT_EQ(a.meta.dump(), b.meta.dump());
  EXPECT_EQ(a.tokenizer_json, b.tokenizer_json);
  EXPECT_EQ(a.tokenizer_config_json, b.tokenizer_config_json);
}

class TrainStateTest : public test::TempDirTest {
 protected:
  // Every file of a directory with its bytes.
  std::map<std::string, std::string> snapshot(const fs::path& dir) const {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = slurp(e.path());
    return out;
  }

  const fs::path& root_ = dir_;
};

TEST_F(TrainStateTest, RoundTripIsBitwise) {
  for (bool moe : {false, true}) {
    const TrainState s = make_state(moe, moe ? 10 : 20);
    const fs::path dir = root_ / (moe ? "moe" : "dense");
    save_train_state(dir.string(), s);
    EXPECT_EQ(entries(dir), (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors",
                                                      "tokenizer.json", "tokenizer_config.json",
                                                      "trainer_state.json"}));
    const TrainState t = load_train_state(dir.string());
    expect_same(s, t);

    // The directory is also a plain F32 checkpoint.
    const Checkpoint ck = load_checkpoint(dir.string());
    EXPECT_EQ(ck.dtype, st::DType::F32);
    EXPECT_TRUE(bitwise_equal(ck.params.storage(), s.params.storage()));
    EXPECT_EQ(ck.tokenizer_json, s.tokenizer_json);

    // The optimizer file: m.<name> and v.<name>, F32, the param shapes.
    const st::File f = st::File::open((dir / "optimizer.safetensors").string());
    EXPECT_EQ(f.tensors().size(), 2 * s.params.entries().size());
    for (const ParamInfo& p : s.params.entries()) {
      for (const char* pre : {"m.", "v."}) {
        const st::TensorView& tv = f.at(pre + p.name);
        EXPECT_EQ(tv.dtype, st::DType::F32);
        EXPECT_EQ(tv.shape, p.shape);
      }
    }
    const nlohmann::json j = nlohmann::json::parse(slurp(dir / "trainer_state.json"));
    EXPECT_EQ(j["format"], "mxrl-train-state");
    EXPECT_EQ(j["version"], 1);
    EXPECT_EQ(j["step"], 1234567890123);
    EXPECT_EQ(j["meta"], s.meta);
  }
  EXPECT_EQ(entries(root_), (std::vector<std::string>{"dense", "moe"}));  // nothing left over
}

TEST_F(TrainStateTest, OverwriteReplacesTheWholeDirectory) {
  const fs::path dir = root_ / "state";
  TrainState a = make_state(false, 1);
  save_train_state(dir.string(), a);
  spit(dir / "stray.txt", "from before");
  TrainState b = make_state(false, 2);
  b.step = 7;
  b.meta = nlohmann::json::object();
  b.tokenizer_json.clear();
  b.tokenizer_config_json.clear();
  save_train_state(dir.string() + "/", b);  // a trailing slash names the same directory
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors",
                                                    "trainer_state.json"}));
  expect_same(b, load_train_state(dir.string()));
  EXPECT_EQ(entries(root_), std::vector<std::string>{"state"});
}

TEST_F(TrainStateTest, ResumeContinuesBitwise) {
  // Two AdamW steps, save, load, one more step: the same as three in a row.
  const ModelConfig cfg = small_test_config(true);
  OptimConfig oc;
  oc.lr = 1e-2;
  oc.weight_decay = 0.1;
  oc.warmup_steps = 2;
  oc.schedule = LrSchedule::Cosine;
  oc.total_steps = 4;
  ParamTable p(cfg);
  std::vector<float> init(p.numel());
  fill_random(init, 5);
  for (size_t i = 0; i < init.size(); ++i) p.storage()[i] = std::isfinite(init[i]) ? init[i] : 0.5f;
  auto grads = [&](int s) {
    std::vector<float> g(p.numel());
    std::mt19937 rng(300 + s);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    for (float& x : g) x = nd(rng);
    return g;
  };
  ParamTable straight = p;
  AdamW a(straight, oc);
  for (int s = 0; s < 3; ++s) a.step(straight, grads(s));

  AdamW b(p, oc);
  for (int s = 0; s < 2; ++s) b.step(p, grads(s));
  TrainState st{cfg, p, b.m(), b.v(), b.step(), {{"optimizer", oc.to_json()}}, {}, {}};
  save_train_state((root_ / "ckpt").string(), st);
  TrainState back = load_train_state((root_ / "ckpt").string());
  AdamW c(back.params, OptimConfig::from_json(back.meta["optimizer"]));
  c.m() = back.m;
  c.v() = back.v;
  c.set_step(back.step);
  c.step(back.params, grads(2));
  EXPECT_EQ(c.step(), 3);
  EXPECT_TRUE(bitwise_equal(back.params.storage(), straight.storage()));
  EXPECT_TRUE(bitwise_equal(c.m(), a.m()));
  EXPECT_TRUE(bitwise_equal(c.v(), a.v()));
}

TEST_F(TrainStateTest, LoadErrorsNameTheFileAndProblem) {
  const TrainState good = make_state(false, 3);
  const fs::path dir = root_ / "bad";
  const std::string opt = (dir / "optimizer.safetensors").string();
  const std::string state = (dir / "trainer_state.json").string();
  int cases = 0;
  auto expect_error = [&](auto mutate, const std::string& file, const std::string& phrase) {
    ++cases;
    fs::remove_all(dir);
    save_train_state(dir.string(), good);
    mutate();
    const std::string msg = error_of([&] { load_train_state(dir.string()); });
    EXPECT_NE(msg.find(file), std::string::npos) << "case " << cases << ": " << msg;
    EXPECT_NE(msg.find(phrase), std::string::npos) << "case " << cases << ": " << msg;
  };
  // Rewrites optimizer.safetensors through edit(writer, tensor).
  auto rewrite_opt = [&](auto edit) {
    const std::string bytes = slurp(opt);  // the File maps the file; keep a copy
    const st::File f = st::File::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), opt);
    st::Writer w;
    for (const auto& t : f.tensors()) edit(w, t);
    fs::remove(opt);
    w.write(opt);
  };
  auto set_state = [&](const std::string& text) { spit(state, text); };

  expect_error([&] { fs::remove(opt); }, opt, "missing");
  expect_error([&] { fs::remove(state); }, state, "missing");
  expect_error([&] { set_state("{\"format\": "); }, state, "not valid JSON");
  expect_error([&] { set_state("[1, 2]"); }, state, "expected a JSON object");
  expect_error([&] { set_state(R"({"format": "hf-trainer", "version": 1, "step": 1, "meta": {}})"); }, state,
               "format is \"hf-trainer\"");
  expect_error([&] { set_state(R"({"version": 1, "step": 1, "meta": {}})"); }, state, "no \"format\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 2, "step": 1, "meta": {}})"); },
               state, "unsupported version 2");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "step": 1, "meta": {}})"); }, state,
               "no \"version\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 1, "step": -1, "meta": {}})"); },
               state, "step must be a non-negative integer");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 1, "step": "3", "meta": {}})"); },
               state, "step must be a non-negative integer");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 1, "meta": {}})"); }, state,
               "no \"step\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 1, "step": 3})"); }, state,
               "no \"meta\"");
  expect_error(
      [&] {
        rewrite_opt([](st::Writer& w, const st::TensorView& t) {
          if (t.name != "v.model.norm.weight") w.add_view(t.name, t.dtype, t.shape, t.data);
        });
      },
      opt, "missing tensor 'v.model.norm.weight'");
  expect_error(
      [&] {
        rewrite_opt([](st::Writer& w, const st::TensorView& t) {
          w.add_view(t.name, t.dtype, t.shape, t.data);
          if (t.name == "m.model.norm.weight") w.add_view("m.model.bogus.weight", t.dtype, t.shape, t.data);
        });
      },
      opt, "unexpected tensor 'm.model.bogus.weight'");
  expect_error(
      [&] {
        rewrite_opt([](st::Writer& w, const st::TensorView& t) {
          w.add_view(t.name, t.dtype, t.shape, t.data);
          if (t.name == "m.model.norm.weight") w.add_view("model.norm.weight", t.dtype, t.shape, t.data);
        });
      },
      opt, "unexpected tensor 'model.norm.weight'");
  expect_error(
      [&] {
        rewrite_opt([](st::Writer& w, const st::TensorView& t) {
          auto shape = t.shape;
          if (t.name == "m.model.layers.0.self_attn.q_proj.weight") shape = {shape[0] * shape[1]};
          w.add_view(t.name, t.dtype, shape, t.data);
        });
      },
      opt, "tensor 'm.model.layers.0.self_attn.q_proj.weight' has shape [8192], the parameter has [128, 64]");
  expect_error(
      [&] {
        rewrite_opt([](st::Writer& w, const st::TensorView& t) {
          if (t.name != "v.model.norm.weight") return w.add_view(t.name, t.dtype, t.shape, t.data);
          w.add(t.name, st::DType::BF16, t.shape, std::vector<std::byte>(t.data.size() / 2));
        });
      },
      opt, "tensor 'v.model.norm.weight' has dtype BF16, expected F32");
  expect_error([&] { spit(opt, "not a safetensors file"); }, opt, "");
  // The model part is checked as a checkpoint, and must be F32.
  expect_error(
      [&] {
        fs::remove(dir / "model.safetensors");
        write_checkpoint_files(dir.string(), good.config, good.params, st::DType::BF16);
      },
      dir.string(), "F32 master weights");
  expect_error([&] { fs::remove(dir / "model.safetensors"); }, (dir / "model.safetensors").string(), "");
  EXPECT_NE(error_of([&] { load_train_state((root_ / "nowhere").string()); }).find("not a train state directory"),
            std::string::npos);
  // A plain checkpoint is not a train state.
  save_checkpoint((root_ / "plain").string(), good.config, good.params, st::DType::F32);
  EXPECT_NE(error_of([&] { load_train_state((root_ / "plain").string()); })
                .find((root_ / "plain" / "trainer_state.json").string() + ": missing"),
            std::string::npos);
}

TEST_F(TrainStateTest, SaveRejectsInconsistentState) {
  const fs::path dir = root_ / "s";
  auto err = [&](auto mutate) {
    TrainState s = make_state(false, 4);
    mutate(s);
    return error_of([&] { save_train_state(dir.string(), s); });
  };
  EXPECT_NE(err([](TrainState& s) { s.m.pop_back(); }).find("first moment m has"), std::string::npos);
  EXPECT_NE(err([](TrainState& s) { s.v.clear(); }).find("second moment v has"), std::string::npos);
  EXPECT_NE(err([](TrainState& s) { s.step = -1; }).find("step"), std::string::npos);
  EXPECT_NE(err([](TrainState& s) { s.config.rope_theta = 1e6; }).find("another model config"), std::string::npos);
  EXPECT_NE(err([](TrainState& s) { s.meta["bad"] = std::string("\xff\xfe"); }).find("cannot serialize meta"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE(entries(root_).empty());
}

TEST_F(TrainStateTest, FailedSaveLeavesTheOldDirectoryIntact) {
  const fs::path dir = root_ / "state";
  const TrainState s = make_state(true, 6);
  save_train_state(dir.string(), s);
  const auto before = snapshot(dir);
  auto intact = [&](const char* what) {
    EXPECT_EQ(snapshot(dir), before) << what;
    EXPECT_EQ(entries(root_), std::vector<std::string>{"state"}) << what;  // no temporary left behind
  };

  // An exception in the middle of filling the new directory.
  EXPECT_THROW(write_dir_atomic(dir.string(),
                                [&](const std::string& tmp) {
                                  save_train_state(tmp + "/nested", s);  // real files are written
                                  write_file_atomic(tmp + "/config.json", "{}");
                                  throw std::runtime_error("disk on fire");
                                }),
               std::runtime_error);
  intact("exception in fill");

  // save_checkpoint failing after its first shard is written (a shard in a
  // subdirectory that does not exist).
  std::map<std::string, std::string> shards;
  for (const ParamInfo& p : s.params.entries()) shards[p.name] = "model-1.safetensors";
  shards["model.norm.weight"] = "zz/model-2.safetensors";
  EXPECT_THROW(save_checkpoint(dir.string(), s.config, s.params, st::DType::F32, shards), Error);
  intact("save_checkpoint mid-write");

  // Saving over a path whose parent is a file.
  spit(root_ / "file", "just a file");
  const std::string msg = error_of([&] { save_train_state((root_ / "file" / "state").string(), s); });
  EXPECT_NE(msg.find((root_ / "file" / "state").string()), std::string::npos) << msg;
  EXPECT_EQ(slurp(root_ / "file"), "just a file");
  // Saving over a file.
  const std::string msg2 = error_of([&] { save_train_state((root_ / "file").string(), s); });
  EXPECT_NE(msg2.find("exists and is not a directory"), std::string::npos) << msg2;
  EXPECT_EQ(slurp(root_ / "file"), "just a file");
  fs::remove(root_ / "file");
  intact("bad destinations");

  EXPECT_NE(error_of([&] { write_dir_atomic("/", [](const std::string&) {}); }), "");
  expect_same(s, load_train_state(dir.string()));
}

TEST_F(TrainStateTest, WriteDirAtomicCreatesParentsAndReplaces) {
  const fs::path dir = root_ / "a" / "b" / "c";
  write_dir_atomic(dir.string(), [](const std::string& tmp) {
    EXPECT_TRUE(fs::is_directory(tmp));
    EXPECT_TRUE(fs::is_empty(tmp));
    write_file_atomic(tmp + "/one", "1");
  });
  EXPECT_EQ(entries(dir), std::vector<std::string>{"one"});
  write_dir_atomic(dir.string(), [](const std::string& tmp) { write_file_atomic(tmp + "/two", "2"); });
  EXPECT_EQ(entries(dir), std::vector<std::string>{"two"});
  EXPECT_EQ(slurp(dir / "two"), "2");
  EXPECT_EQ(entries(root_ / "a" / "b"), std::vector<std::string>{"c"});
  // Relative paths resolve against the working directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  write_dir_atomic("rel", [](const std::string& tmp) { write_file_atomic(tmp + "/x", "x"); });
  fs::current_path(cwd);
  EXPECT_EQ(slurp(root_ / "rel" / "x"), "x");
}

}  // namespace
}  // namespace mxrl
