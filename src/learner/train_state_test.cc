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

#include <xxhash.h>

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
  // Moments are finite (a load refuses others): a negative denormal and the largest float instead.
  for (std::vector<float>* x : {&s.m, &s.v}) (*x)[2] = from_bits(0x80000001u), (*x)[3] = from_bits(0x7f7fffffu);
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

// Records the files' XXH3 as they are now in DIR/trainer_state.json, as a
// save would have: for states changed on purpose past the digests.
void reseal(const fs::path& dir) {
  nlohmann::json j = nlohmann::json::parse(slurp(dir / "trainer_state.json"));
  j["xxh3"] = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "trainer_state.json") {
      const std::string b = slurp(e.path());
      j["xxh3"][e.path().filename().string()] = fmt::format("{:016x}", XXH3_64bits(b.data(), b.size()));
    }
  spit(dir / "trainer_state.json", j.dump(2));
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
    EXPECT_EQ(entries(dir),
              (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors", "tokenizer.json",
                                        "tokenizer_config.json", "trainer_state.json"}));
    const TrainState t = load_train_state(dir.string());
    expect_same(s, t);

    // The directory is also a plain F32 checkpoint.
    const Checkpoint ck = load_checkpoint(dir.string());
    EXPECT_EQ(ck.dtype, DType::F32);
    EXPECT_TRUE(bitwise_equal(ck.params.storage(), s.params.storage()));
    EXPECT_EQ(ck.tokenizer_json, s.tokenizer_json);

    // The optimizer file: m.<name> and v.<name>, F32, the param shapes.
    const SafetensorsFile f = SafetensorsFile::open((dir / "optimizer.safetensors").string());
    EXPECT_EQ(f.tensors().size(), 2 * s.params.entries().size());
    for (const ParamInfo& p : s.params.entries()) {
      for (const char* pre : {"m.", "v."}) {
        const TensorView& tv = f.at(pre + p.name);
        EXPECT_EQ(tv.dtype, DType::F32);
        EXPECT_EQ(tv.shape, p.shape);
      }
    }
    const nlohmann::json j = nlohmann::json::parse(slurp(dir / "trainer_state.json"));
    EXPECT_EQ(j["format"], "mxrl-train-state");
    EXPECT_EQ(j["version"], 2);
    EXPECT_EQ(j["xxh3"].size(), 5u);  // every other file
    EXPECT_EQ(j["shapes"].size(), s.params.entries().size());
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
    const SafetensorsFile f = SafetensorsFile::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), opt);
    SafetensorsWriter w;
    for (const auto& t : f.tensors()) edit(w, t);
    fs::remove(opt);
    w.write(opt);
    reseal(dir);  // past the digests, to the structural checks
  };
  auto set_state = [&](const std::string& text) { spit(state, text); };

  expect_error([&] { fs::remove(opt); }, opt, "missing");
  expect_error([&] { fs::remove(state); }, state, "missing");
  expect_error([&] { set_state("{\"format\": "); }, state, "not valid JSON");
  expect_error([&] { set_state("[1, 2]"); }, state, "expected a JSON object");
  expect_error([&] { set_state(R"({"format": "hf-trainer", "version": 2, "step": 1, "meta": {}})"); }, state,
               "format is \"hf-trainer\"");
  expect_error([&] { set_state(R"({"version": 2, "step": 1, "meta": {}})"); }, state, "no \"format\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 1, "step": 1, "meta": {}})"); }, state,
               "unsupported version 1 (this build reads version 2)");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "step": 1, "meta": {}})"); }, state, "no \"version\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 2, "step": -1, "meta": {}})"); }, state,
               "step must be a non-negative integer");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 2, "step": "3", "meta": {}})"); }, state,
               "step must be a non-negative integer");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 2, "meta": {}})"); }, state, "no \"step\"");
  expect_error([&] { set_state(R"({"format": "mxrl-train-state", "version": 2, "step": 3})"); }, state, "no \"meta\"");
  expect_error(
      [&] {
        rewrite_opt([](SafetensorsWriter& w, const TensorView& t) {
          if (t.name != "v.model.norm.weight") w.add_view(t.name, t.dtype, t.shape, t.data);
        });
      },
      opt, "missing tensor 'v.model.norm.weight'");
  expect_error(
      [&] {
        rewrite_opt([](SafetensorsWriter& w, const TensorView& t) {
          w.add_view(t.name, t.dtype, t.shape, t.data);
          if (t.name == "m.model.norm.weight") w.add_view("m.model.bogus.weight", t.dtype, t.shape, t.data);
        });
      },
      opt, "unexpected tensor 'm.model.bogus.weight'");
  expect_error(
      [&] {
        rewrite_opt([](SafetensorsWriter& w, const TensorView& t) {
          w.add_view(t.name, t.dtype, t.shape, t.data);
          if (t.name == "m.model.norm.weight") w.add_view("model.norm.weight", t.dtype, t.shape, t.data);
        });
      },
      opt, "unexpected tensor 'model.norm.weight'");
  expect_error(
      [&] {
        rewrite_opt([](SafetensorsWriter& w, const TensorView& t) {
          auto shape = t.shape;
          if (t.name == "m.model.layers.0.self_attn.q_proj.weight") shape = {shape[0] * shape[1]};
          w.add_view(t.name, t.dtype, shape, t.data);
        });
      },
      opt, "tensor 'm.model.layers.0.self_attn.q_proj.weight' has shape [8192], the parameter has [128, 64]");
  expect_error(
      [&] {
        rewrite_opt([](SafetensorsWriter& w, const TensorView& t) {
          if (t.name != "v.model.norm.weight") return w.add_view(t.name, t.dtype, t.shape, t.data);
          w.add(t.name, DType::BF16, t.shape, std::vector<std::byte>(t.data.size() / 2));
        });
      },
      opt, "tensor 'v.model.norm.weight' has dtype BF16, expected F32");
  expect_error([&] { spit(opt, "not a safetensors file"); }, opt, "");
  // The model part is checked as a checkpoint, and must be F32.
  expect_error(
      [&] {
        fs::remove(dir / "model.safetensors");
        write_checkpoint_files(dir.string(), good.config, good.params, DType::BF16);
        reseal(dir);
      },
      dir.string(), "F32 master weights");
  expect_error([&] { fs::remove(dir / "model.safetensors"); }, (dir / "model.safetensors").string(), "");
  EXPECT_NE(error_of([&] { load_train_state((root_ / "nowhere").string()); }).find("not a train state directory"),
            std::string::npos);
  // A plain checkpoint is not a train state.
  save_checkpoint((root_ / "plain").string(), good.config, good.params, DType::F32);
  EXPECT_NE(error_of([&] {
              load_train_state((root_ / "plain").string());
            }).find((root_ / "plain" / "trainer_state.json").string() + ": missing"),
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
  EXPECT_THROW(save_checkpoint(dir.string(), s.config, s.params, DType::F32, shards), Error);
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

// One flipped byte anywhere in the state (here deep in the tensor data, where
// every structural check passes) is refused naming the file; so are a file the
// digests do not cover and a recorded file that is gone.
TEST_F(TrainStateTest, AFileThatChangedAfterTheSaveIsRefusedNamingIt) {
  TrainState good = make_state(false, 7);
  good.files["rollout.bin"] = "pending samples";
  const fs::path dir = root_ / "state";
  for (const char* file :
       {"model.safetensors", "optimizer.safetensors", "config.json", "tokenizer.json", "rollout.bin"}) {
    fs::remove_all(dir);
    save_train_state(dir.string(), good);
    const fs::path p = dir / file;
    std::string b = slurp(p);
    b[b.size() - 3] ^= 0x10;
    spit(p, b);
    const std::string msg = error_of([&] { load_train_state(dir.string()); });
    EXPECT_EQ(msg.rfind(p.string() + ": XXH3 is ", 0), 0u) << file << ": " << msg;
    EXPECT_NE(msg.find("trainer_state.json recorded "), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  fs::remove_all(dir);
  save_train_state(dir.string(), good);
  spit(dir / "extra.bin", "x");
  EXPECT_EQ(error_of([&] { load_train_state(dir.string()); }),
            (dir / "extra.bin").string() + ": not covered by the XXH3 digests in trainer_state.json");
  fs::remove(dir / "extra.bin");
  fs::remove(dir / "tokenizer_config.json");
  EXPECT_EQ(error_of([&] { load_train_state(dir.string()); }),
            (dir / "tokenizer_config.json").string() + ": missing (its XXH3 is recorded in trainer_state.json)");
  // A state without digests (version 1 wrote none) is refused.
  nlohmann::json j = nlohmann::json::parse(slurp(dir / "trainer_state.json"));
  j.erase("xxh3");
  spit(dir / "trainer_state.json", j.dump());
  EXPECT_EQ(error_of([&] { load_train_state(dir.string()); }),
            (dir / "trainer_state.json").string() + ": no \"xxh3\" object (the files' digests)");
}

// An Inf in v (or a NaN in m) resumes into garbage: refused, naming the tensor.
TEST_F(TrainStateTest, NonFiniteOptimizerStateIsRefused) {
  const TrainState good = make_state(false, 8);
  const fs::path dir = root_ / "state";
  const std::string opt = (dir / "optimizer.safetensors").string();
  for (const float bad : {INFINITY, -INFINITY, NAN}) {
    fs::remove_all(dir);
    save_train_state(dir.string(), good);
    const std::string bytes = slurp(opt);
    const SafetensorsFile f = SafetensorsFile::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), opt);
    SafetensorsWriter w;
    std::vector<float> edited;
    for (const auto& t : f.tensors()) {
      if (t.name != (std::isnan(bad) ? "m.model.norm.weight" : "v.model.norm.weight")) {
        w.add_view(t.name, t.dtype, t.shape, t.data);
        continue;
      }
      edited.resize(t.data.size() / 4);
      std::memcpy(edited.data(), t.data.data(), t.data.size());
      edited[5] = bad;
      w.add_view(t.name, t.dtype, t.shape, std::as_bytes(std::span<const float>(edited)));
    }
    fs::remove(opt);
    w.write(opt);
    reseal(dir);  // a state saved that way, not one corrupted after the save
    const std::string msg = error_of([&] { load_train_state(dir.string()); });
    EXPECT_EQ(msg, opt + ": tensor '" + (std::isnan(bad) ? "m" : "v") + ".model.norm.weight' holds " +
                       (std::isnan(bad) ? "NaN"
                        : bad > 0       ? "+inf"
                                        : "-inf") +
                       " at element 5; the optimizer state must be finite");
  }
}

// A state whose model (config, weights and moments, consistent among
// themselves) is not the one it recorded is refused.
TEST_F(TrainStateTest, AModelThatDoesNotMatchTheRecordedShapesIsRefused) {
  const fs::path a = root_ / "a", b = root_ / "b";
  save_train_state(a.string(), make_state(false, 9));
  TrainState other = make_state(false, 9);
  other.config.intermediate_size *= 2;
  other.params = ParamTable(other.config);
  other.params.storage().assign(other.params.numel(), 0.5f);
  other.m.assign(other.params.numel(), 0.0f);
  other.v.assign(other.params.numel(), 0.0f);
  save_train_state(b.string(), other);
  for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors"})
    fs::copy_file(b / f, a / f, fs::copy_options::overwrite_existing);
  reseal(a);
  const std::string msg = error_of([&] { load_train_state(a.string()); });
  EXPECT_EQ(msg.rfind((a / "trainer_state.json").string() + ": the model's parameter 'model.layers.0.mlp.", 0), 0u)
      << msg;
  EXPECT_NE(msg.find("the state recorded ["), std::string::npos) << msg;
  // A recorded parameter the model lacks.
  fs::remove_all(a);
  save_train_state(a.string(), make_state(false, 9));
  nlohmann::json j = nlohmann::json::parse(slurp(a / "trainer_state.json"));
  j["shapes"]["model.layers.9.mlp.up_proj.weight"] = {4, 4};
  spit(a / "trainer_state.json", j.dump());
  EXPECT_EQ(error_of([&] { load_train_state(a.string()); }),
            (a / "trainer_state.json").string() +
                ": the state recorded parameter 'model.layers.9.mlp.up_proj.weight' [4, 4], which the model lacks");
}

}  // namespace
}  // namespace mxrl
