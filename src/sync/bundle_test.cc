// The weight-sync bundle (sync/bundle.h): byte-identical serialize/parse round
// trips per plan; ship bundles decode into a sampler model whose manifest is
// the learner's expected one (and the learner's own when the plans match);
// requantize bundles quantized by the sampler under its own plan; which ships
// are refused; the safetensors keys; and every corruption refused with one
// line naming the tensor.
#include "sync/bundle.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "io/safetensors.h"
#include "model/init.h"
#include "testing/errors.h"
#include "testing/small_config.h"
#include "util/error.h"

namespace mxrl {
namespace {

using test::error_of;

using nlohmann::json;

ParamTable make_params(bool moe, uint64_t seed = 11) {
  ParamTable p(small_test_config(moe));
  init_params(p, seed, 0.2f);
  return p;
}

PrecisionPlan plan(const std::string& name) { return PrecisionPlan::named(name); }

// Expects f to throw one line starting with `prefix` and containing every one of `parts`.
template <typename F>
void expect_refused(F&& f, const std::string& prefix, std::initializer_list<std::string> parts) {
  const std::string m = error_of(f);
  ASSERT_FALSE(m.empty()) << "accepted; expected a refusal starting " << prefix;
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
}

// ---- a raw safetensors file, to corrupt what serialize would never write ----

struct RawTensor {
  std::string key, dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};
struct RawFile {
  std::map<std::string, std::string> meta;
  std::vector<RawTensor> tensors;
};

RawFile unpack(const std::vector<std::byte>& bytes) {
  const SafetensorsFile f = SafetensorsFile::parse(bytes, "unpack");
  RawFile r{f.metadata(), {}};
  for (const TensorView& t : f.tensors())
    r.tensors.push_back({t.name, dtype_name(t.dtype), t.shape, {t.data.begin(), t.data.end()}});
  return r;
}

std::vector<std::byte> pack(const RawFile& r) {
  json h = json::object();
  h["__metadata__"] = r.meta;
  uint64_t off = 0;
  for (const RawTensor& t : r.tensors) {
    h[t.key] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(uint64_t(text.size()) >> (8 * i));
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  for (const RawTensor& t : r.tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

RawTensor& tensor(RawFile& r, const std::string& key) {
  for (RawTensor& t : r.tensors)
    if (t.key == key) return t;
  throw Error("no tensor " + key);
}

size_t entry_index(const Bundle& b, const std::string& name, const std::string& part) {
  for (size_t i = 0; i < b.manifest.size(); ++i)
    if (b.manifest[i].name == name && b.manifest[i].part == part) return i;
  throw Error("no entry " + name + " [" + part + "]");
}

// ---- LinearPrecision::parse, sync modes ----

TEST(LinearPrecisionParse, InvertsStr) {
  for (Precision p : {Precision::FP32, Precision::BF16, Precision::MXFP8, Precision::FP8Tensor, Precision::FP8Block128})
    for (ElemType e : {ElemType::E4M3, ElemType::E5M2, ElemType::E2M3, ElemType::E3M2, ElemType::E2M1})
      for (ScaleRule r : {ScaleRule::Floor, ScaleRule::RCeil}) {
        const LinearPrecision lp{p, e, r};
        const LinearPrecision back = LinearPrecision::parse(lp.str());
        EXPECT_EQ(back.str(), lp.str());
        EXPECT_EQ(back.precision, p);
      }
  EXPECT_EQ(LinearPrecision::parse("mxfp8(e5m2,floor)"),
            (LinearPrecision{Precision::MXFP8, ElemType::E5M2, ScaleRule::Floor}));
  EXPECT_EQ(LinearPrecision::parse("bf16"), LinearPrecision{Precision::BF16});  // defaults where str() shows nothing
  EXPECT_EQ(LinearPrecision::parse("fp8-block128(e4m3)"), (LinearPrecision{Precision::FP8Block128, ElemType::E4M3}));
  for (const char* bad : {"", "mxfp8", "mxfp8(e4m3)", "bf16(e4m3)", "MXFP8(e4m3,rceil)", "fp8-tensor(e4m3,rceil)"})
    EXPECT_NE(error_of([&] { LinearPrecision::parse(bad); }).find("unknown linear precision"), std::string::npos)
        << bad;
}

TEST(SyncMode, NamesAndParse) {
  EXPECT_STREQ(sync_mode_name(SyncMode::Ship), "ship");
  EXPECT_STREQ(sync_mode_name(SyncMode::Requantize), "requantize");
  EXPECT_EQ(parse_sync_mode("ship"), SyncMode::Ship);
  EXPECT_EQ(parse_sync_mode("requantize"), SyncMode::Requantize);
  const std::string m = error_of([] { parse_sync_mode("push"); });
  EXPECT_NE(m.find("ship, requantize"), std::string::npos) << m;
}

// ---- round trips ----

TEST(Bundle, RoundTripIsByteIdenticalPerPlan) {
  for (bool moe : {false, true}) {
    const ParamTable masters = make_params(moe);
    for (const char* name : {"mxfp8", "bf16", "mxfp8-half", "fp8-block128", "fp32"}) {
      SCOPED_TRACE(std::string(moe ? "moe " : "dense ") + name);
      const Model learner(masters, plan(name));
      for (const Bundle& b :
           {make_ship_bundle(learner, masters, plan(name), 42), make_requantize_bundle(masters, plan(name), 7)}) {
        const std::vector<std::byte> bytes = serialize(b);
        const Bundle back = parse_bundle(bytes, "b.safetensors");
        EXPECT_EQ(serialize(back), bytes);
        EXPECT_EQ(back.manifest, b.manifest);
        EXPECT_EQ(back.payload, b.payload);
        EXPECT_EQ(back.version, b.version);
        EXPECT_EQ(back.mode, b.mode);
        EXPECT_EQ(back.recipe, name);
        EXPECT_EQ(back.plan, name);
        EXPECT_EQ(back.config, masters.config().to_json());
      }
      // A ship bundle for the learner's own plan lists exactly the learner's manifest.
      EXPECT_EQ(make_ship_bundle(learner, masters, plan(name), 0).manifest, model_digests(learner));
    }
  }
}

TEST(Bundle, FileRoundTripAndHeader) {
  const ParamTable masters = make_params(false);
  const Model learner(masters, plan("mxfp8"));
  const Bundle b = make_ship_bundle(learner, masters, plan("mxfp8"), 123456789012345ull);
  const auto dir = std::filesystem::temp_directory_path() / ("mxrl_bundle_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "b.safetensors").string();
  write_bundle(b, path);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::byte> bytes = serialize(b);
  ASSERT_EQ(raw.size(), bytes.size());
  EXPECT_EQ(std::memcmp(raw.data(), bytes.data(), raw.size()), 0);
  EXPECT_EQ(read_bundle(path).manifest, b.manifest);
  const SafetensorsFile f = SafetensorsFile::open(path);  // a plain safetensors file
  EXPECT_EQ(f.metadata().at("format"), "mxrl.sync.bundle/1");
  EXPECT_EQ(f.metadata().at("version"), "123456789012345");
  EXPECT_EQ(f.metadata().at("sync"), "ship");
  EXPECT_EQ(json::parse(f.metadata().at("manifest")), digests_to_json(b.manifest));
  EXPECT_EQ(ModelConfig::from_json(json::parse(f.metadata().at("config")), "c").to_json(), masters.config().to_json());
  std::filesystem::remove_all(dir);
  expect_refused([&] { read_bundle(path); }, path + ": cannot open", {});
}

TEST(Bundle, KeysFollowVllmNamingAndTheTiedHeadIsLmHead) {
  const ParamTable dense = make_params(false);  // tied
  const Model mx(dense, plan("mxfp8"));
  const SafetensorsFile f = SafetensorsFile::parse(serialize(make_ship_bundle(mx, dense, plan("mxfp8"), 0)), "f");
  auto dtype = [&](const char* key) { return std::string(dtype_name(f.at(key).dtype)); };
  EXPECT_EQ(dtype("model.layers.0.self_attn.q_proj.weight"), "F8_E4M3");
  EXPECT_EQ(dtype("model.layers.0.self_attn.q_proj.weight_scale"), "F8_E8M0");
  EXPECT_EQ(f.at("model.layers.0.self_attn.q_proj.weight_scale").shape, (std::vector<int64_t>{128, 2}));
  EXPECT_EQ(dtype("model.embed_tokens.weight"), "BF16");  // the compute copy
  EXPECT_EQ(dtype("lm_head.weight"), "BF16");             // the tied head (bf16 in mxfp8)
  EXPECT_EQ(dtype("model.norm.weight"), "BF16");
  const Model fp8(dense, plan("fp8-block128"));
  const SafetensorsFile g =
      SafetensorsFile::parse(serialize(make_ship_bundle(fp8, dense, plan("fp8-block128"), 0)), "g");
  EXPECT_EQ(std::string(dtype_name(g.at("model.layers.1.mlp.down_proj.weight_scale").dtype)), "F32");
  // Untied: lm_head.weight is the head, and no tied name is listed.
  const ParamTable moe = make_params(true);
  const Bundle mb = make_ship_bundle(Model(moe, plan("mxfp8")), moe, plan("mxfp8"), 0);
  for (const TensorDigest& d : mb.manifest) EXPECT_NE(d.name, kTiedLmHeadName);
  const SafetensorsFile h = SafetensorsFile::parse(serialize(mb), "h");
  EXPECT_EQ(std::string(dtype_name(h.at("lm_head.weight").dtype)), "BF16");
  EXPECT_EQ(std::string(dtype_name(h.at("model.layers.0.mlp.experts.3.down_proj.weight_scale").dtype)), "F8_E8M0");
}

// ---- sampler side ----

TEST(Bundle, ShipDecodesToTheExpectedManifest) {
  for (bool moe : {false, true}) {
    const ParamTable masters = make_params(moe);
    for (const char* lp : {"mxfp8", "bf16", "fp8-block128", "fp32"}) {
      const Model learner(masters, plan(lp));
      std::vector<std::string> samplers = {lp, "bf16"};
      if (std::string(lp) == "mxfp8") samplers.push_back("mxfp8-half");
      if (std::string(lp) == "fp32") samplers = {"fp32"};  // fp32 copies feed only fp32 samplers
      for (const std::string& sp : samplers) {
        SCOPED_TRACE(fmt::format("{} {} -> {}", moe ? "moe" : "dense", lp, sp));
        const Bundle b = make_ship_bundle(learner, masters, plan(sp), 5);
        const std::vector<TensorDigest> expected = expected_manifest(learner, masters, plan(sp));
        EXPECT_EQ(expected, model_digests(Model(masters, plan(sp))));
        EXPECT_EQ(b.manifest, expected);
        const Bundle got = parse_bundle(serialize(b), "wire");
        const Model sampler =
            Model::from_shipment(masters.config(), plan(sp), bundle_to_shipment(got, masters.config()));
        EXPECT_EQ(model_digests(sampler), expected);
        if (sp == lp) {
          EXPECT_EQ(model_digests(sampler), model_digests(learner));
        }
      }
    }
  }
}

TEST(Bundle, ShipOnGridIsTheLearnersBytes) {
  const ParamTable masters = make_params(false);
  const Model learner(masters, plan("mxfp8"));
  const Model sampler = Model::from_shipment(
      masters.config(), plan("mxfp8-half"),
      bundle_to_shipment(make_ship_bundle(learner, masters, plan("mxfp8-half"), 1), masters.config()));
  // Layer 0 on the learner's grid, byte for byte; layer 1 the BF16 copy.
  EXPECT_EQ(sampler.layer(0).q.codes, learner.layer(0).q.codes);
  EXPECT_EQ(sampler.layer(0).q.mx_scales, learner.layer(0).q.mx_scales);
  EXPECT_EQ(sampler.layer(1).down.prec.precision, Precision::BF16);
  EXPECT_EQ(sampler.layer(1).down.bf16, Model(masters, plan("bf16")).layer(1).down.bf16);
}

TEST(Bundle, RequantizeIsQuantizedUnderTheSamplersPlan) {
  for (bool moe : {false, true}) {
    const ParamTable masters = make_params(moe);
    const Model learner(masters, plan("mxfp8"));
    const Bundle b = parse_bundle(serialize(make_requantize_bundle(masters, plan("mxfp8"), 9)), "wire");
    for (const TensorDigest& d : b.manifest) {
      EXPECT_EQ(d.part, "bf16");
      EXPECT_EQ(d.precision, "bf16");
    }
    const ParamTable got = bundle_to_params(b, masters.config());
    for (const char* sp : {"mxfp8", "mxfp8-floor", "bf16"}) {
      SCOPED_TRACE(fmt::format("{} mxfp8 -> {}", moe ? "moe" : "dense", sp));
      EXPECT_EQ(model_digests(Model(got, plan(sp))), expected_manifest(learner, masters, plan(sp)));
    }
  }
  // An fp32 learner sends its FP32 masters.
  const ParamTable masters = make_params(false);
  const ParamTable got = bundle_to_params(make_requantize_bundle(masters, plan("fp32"), 0), masters.config());
  EXPECT_EQ(got.storage(), masters.storage());
}

TEST(Bundle, ShipCompatibility) {
  const ModelConfig cfg = small_test_config(true);
  check_ship_compatible(plan("mxfp8"), plan("mxfp8-half"), cfg);
  check_ship_compatible(plan("mxfp8"), plan("bf16"), cfg);
  check_ship_compatible(plan("fp8-block128"), plan("bf16"), cfg);
  check_ship_compatible(plan("mxfp8"), PrecisionPlan::resolve("mxfp8+fp8kv"), cfg);  // the KV cache is no weight
  expect_refused([&] { check_ship_compatible(plan("bf16"), plan("mxfp8"), cfg); }, "ship: ",
                 {"model.layers.0.self_attn.q_proj.weight", "bf16 on the learner", "mxfp8(e4m3,rceil) on the sampler",
                  "requantize"});
  expect_refused([&] { check_ship_compatible(plan("mxfp8"), plan("mxfp8-floor"), cfg); },
                 "ship: ", {"q_proj.weight", "mxfp8(e4m3,rceil) on the learner", "mxfp8(e4m3,floor) on the sampler"});
  expect_refused([&] { check_ship_compatible(plan("mxfp8"), plan("fp32"), cfg); }, "ship: ", {"embeddings"});
  PrecisionPlan fp32_linears = plan("mxfp8");
  fp32_linears.name = "mxfp8-fp32-head";
  fp32_linears.lm_head = {Precision::FP32};
  expect_refused([&] { check_ship_compatible(plan("mxfp8"), fp32_linears, cfg); },
                 "ship: ", {"lm_head.weight", "fp32"});
  // The tied head is checked under its own name.
  PrecisionPlan mx_head = plan("mxfp8");
  mx_head.lm_head = mx_head.decoder;
  expect_refused([&] { check_ship_compatible(plan("mxfp8"), mx_head, small_test_config(false)); },
                 "ship: ", {kTiedLmHeadName});
  const ParamTable masters = make_params(false);
  expect_refused([&] { make_ship_bundle(Model(masters, plan("bf16")), masters, plan("mxfp8"), 0); },
                 "ship: ", {"q_proj"});
}

TEST(Bundle, DecodingRefusesTheWrongModelOrMode) {
  const ParamTable dense = make_params(false);
  const Bundle ship = make_ship_bundle(Model(dense, plan("mxfp8")), dense, plan("mxfp8"), 3);
  const Bundle req = make_requantize_bundle(dense, plan("mxfp8"), 3);
  expect_refused([&] { bundle_to_params(ship, dense.config()); },
                 "bundle v3: ", {"a ship bundle, expected requantize"});
  expect_refused([&] { bundle_to_shipment(req, dense.config()); },
                 "bundle v3: ", {"a requantize bundle, expected ship"});
  ModelConfig other = dense.config();
  other.intermediate_size = 128;
  expect_refused([&] { bundle_to_shipment(ship, other); }, "bundle v3: ", {"another model", "intermediate_size"});
  // A stored dtype is not the model's shape.
  ModelConfig bf16_stored = dense.config();
  bf16_stored.torch_dtype = "bfloat16";
  EXPECT_NO_THROW(bundle_to_shipment(ship, bf16_stored));
  // A part missing, or listed under a precision its bytes do not fit.
  const size_t q_scales = entry_index(ship, "model.layers.0.self_attn.q_proj.weight", "scales");
  Bundle cut = ship;
  cut.manifest.erase(cut.manifest.begin() + q_scales), cut.payload.erase(cut.payload.begin() + q_scales);
  expect_refused([&] { bundle_to_shipment(cut, dense.config()); }, "bundle v3: ", {"q_proj.weight", "parts"});
  Bundle relabeled = ship;
  relabeled.manifest[q_scales - 1].precision = relabeled.manifest[q_scales].precision = "fp8-tensor(e4m3)";
  expect_refused([&] { bundle_to_shipment(relabeled, dense.config()); }, "bundle v3: ", {"q_proj.weight"});
  Bundle missing = req;
  missing.manifest.pop_back(), missing.payload.pop_back();
  expect_refused([&] { bundle_to_params(missing, dense.config()); }, "bundle v3: ", {"no tensor 'model.norm.weight'"});
}

// ---- corruption ----

class Corrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    masters_ = std::make_unique<ParamTable>(make_params(true));
    bytes_ = serialize(make_ship_bundle(Model(*masters_, plan("mxfp8")), *masters_, plan("mxfp8"), 4));
  }
  void refused(const std::vector<std::byte>& bytes, std::initializer_list<std::string> parts) {
    expect_refused([&] { parse_bundle(bytes, "bad.safetensors"); }, "bad.safetensors: ", parts);
  }
  // The file with one change made to its raw form.
  template <typename F>
  std::vector<std::byte> edited(F&& f) {
    RawFile r = unpack(bytes_);
    f(r);
    return pack(r);
  }
  std::unique_ptr<ParamTable> masters_;
  std::vector<std::byte> bytes_;
};

TEST_F(Corrupt, TheUneditedFileParses) {
  EXPECT_EQ(serialize(parse_bundle(edited([](RawFile&) {}), "ok")), bytes_);
}

TEST_F(Corrupt, AFlippedPayloadByteNamesTheTensorAndPart) {
  const std::string key = "model.layers.2.mlp.experts.1.up_proj.weight_scale";
  refused(edited([&](RawFile& r) { tensor(r, key).bytes[3] ^= std::byte{1}; }),
          {"'model.layers.2.mlp.experts.1.up_proj.weight' ['scales']", "xxh3"});
  refused(edited([&](RawFile& r) { tensor(r, "model.norm.weight").bytes[0] ^= std::byte{0x80}; }),
          {"'model.norm.weight' ['bf16']", "xxh3"});
  // Straight into the buffer: the last byte is the last tensor's.
  std::vector<std::byte> b = bytes_;
  b.back() ^= std::byte{0x40};
  refused(b, {"'lm_head.weight' ['bf16']", "xxh3"});  // the untied head, last in table order
}

TEST_F(Corrupt, ADroppedOrExtraTensor) {
  refused(edited([](RawFile& r) {
            std::erase_if(r.tensors,
                          [](const RawTensor& t) { return t.key == "model.layers.1.self_attn.v_proj.weight"; });
          }),
          {"'model.layers.1.self_attn.v_proj.weight' ['codes']", "no tensor"});
  refused(edited([](RawFile& r) {
            r.tensors.push_back({"extra.weight", "F32", {2}, std::vector<std::byte>(8)});
          }),
          {"'extra.weight' is not in the manifest"});
}

TEST_F(Corrupt, AHeaderDisagreeingWithTheManifest) {
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  refused(edited([&](RawFile& r) { tensor(r, q).dtype = "F8_E5M2"; }),
          {"'" + q + "' ['codes']", "is F8_E5M2", "F8_E4M3"});
  refused(edited([&](RawFile& r) { tensor(r, q).dtype = "U8"; }), {q, "U8"});
  refused(edited([&](RawFile& r) { tensor(r, q).shape = {64, 128}; }), {q, "shape [64, 128]", "[128, 64]"});
  refused(edited([&](RawFile& r) {
            RawTensor& t = tensor(r, q);
            t.shape = {129, 64};
            t.bytes.resize(129 * 64);
          }),
          {q, "shape"});
}

TEST_F(Corrupt, BadMetadata) {
  auto meta = [&](const std::string& key, const std::string& value) {
    return edited([&](RawFile& r) { r.meta[key] = value; });
  };
  refused(edited([](RawFile& r) { r.meta.erase("format"); }), {"no \"format\"", "not an mxrl sync bundle"});
  refused(meta("format", "mxrl.sync.bundle/2"), {"'mxrl.sync.bundle/2'", "mxrl.sync.bundle/1"});
  for (const char* v : {"", "01", "-1", "+1", "1.0", "0x10", "18446744073709551616", "1\n"})
    refused(meta("version", v), {"\"version\""});
  EXPECT_EQ(parse_bundle(meta("version", "18446744073709551615"), "max").version, 18446744073709551615ull);
  refused(edited([](RawFile& r) { r.meta.erase("version"); }), {"no \"version\""});
  refused(meta("sync", "push"), {"\"sync\"", "'push'"});
  refused(meta("recipe", ""), {"\"recipe\""});
  refused(meta("extra", "1"), {"unknown __metadata__ key 'extra'"});
  refused(meta("config", "{not json"), {"\"config\"", "not valid JSON"});
  refused(meta("config", "{\"model_type\": \"llama\"}"), {"\"config\"", "llama"});
  json c = json::parse(unpack(bytes_).meta.at("config"));
  c["odd\nkey"] = 1;  // refused by name, on one line
  refused(meta("config", c.dump()), {"\"config\"", "unknown field \"odd\\nkey\""});
  refused(meta("manifest", "[{\"name\": 1"), {"\"manifest\"", "not valid JSON"});
  refused(meta("manifest", "{}"), {"\"manifest\"", "array"});
  json m = json::parse(unpack(bytes_).meta.at("manifest"));
  size_t q = 0;  // q_proj's codes, then its scales
  while (m[q]["name"] != "model.layers.0.self_attn.q_proj.weight") ++q;
  m[0].erase("xxh3");
  refused(meta("manifest", m.dump()), {"\"manifest\"", "entry [0]", "xxh3"});
  m = json::parse(unpack(bytes_).meta.at("manifest"));
  m[q]["part"] = "weights";
  refused(meta("manifest", m.dump()), {"'model.layers.0.self_attn.q_proj.weight' ['weights']", "unknown part"});
  m = json::parse(unpack(bytes_).meta.at("manifest"));
  m[q + 1]["dtype"] = "BF16";
  refused(meta("manifest", m.dump()), {"q_proj.weight' ['scales']", "'BF16' does not suit"});
  m = json::parse(unpack(bytes_).meta.at("manifest"));
  m[q + 2] = m[q];  // a part listed twice
  refused(meta("manifest", m.dump()), {"q_proj.weight' ['codes']", "listed twice"});
  m = json::parse(unpack(bytes_).meta.at("manifest"));
  m[0]["name"] = "evil\nname";
  refused(meta("manifest", m.dump()), {"evil\\x0aname"});
  refused(std::vector<std::byte>(bytes_.begin(), bytes_.begin() + 100), {"header length"});
}

}  // namespace
}  // namespace mxrl
