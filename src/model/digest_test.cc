// Per-tensor digests and manifests (model/digest.h): determinism, locality of
// changes, parts and dtypes per plan, grid identity against an independent
// quantization of the compute copy, tied lm_head, and the findings
// compare_digests reports for coverage, placement and dtype faults.
#include "model/digest.h"
#include "testing/small_config.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <set>

#include <fmt/ranges.h>

#include "model/init.h"
#include "numerics/fp8_grid.h"
#include "numerics/mx.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

// Dense (tied embeddings) or MoE (untied; layer 1 of 3 dense via mlp_only_layers).

ParamTable make_params(bool moe, uint64_t seed = 7) {
  ParamTable p(small_test_config(moe));
  init_params(p, seed, 0.2f);
  return p;
}

std::vector<TensorDigest> digests(const ParamTable& p, const std::string& plan) {
  return model_digests(Model(p, PrecisionPlan::named(plan)));
}

const TensorDigest& entry(const std::vector<TensorDigest>& d, const std::string& name, const std::string& part) {
  for (const TensorDigest& t : d)
    if (t.name == name && t.part == part) return t;
  throw Error("no digest entry " + name + " [" + part + "]");
}

template <typename T>
uint64_t xxh(const std::vector<T>& v) {
  return XXH3_64bits(v.data(), v.size() * sizeof(T));
}

std::vector<uint16_t> bf16_of(const float* w, int64_t n) {
  std::vector<uint16_t> b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = f32_to_bf16(w[i]);
  return b;
}

// The names a manifest lists, deduplicated, in order.
std::vector<std::string> names_of(const std::vector<TensorDigest>& d) {
  std::vector<std::string> out;
  for (const TensorDigest& t : d)
    if (out.empty() || out.back() != t.name) out.push_back(t.name);
  return out;
}

// The names the manifest must list: the parameter table, with the tied
// logits weight appended under its own name.
std::vector<std::string> expected_names(const ParamTable& p) {
  std::vector<std::string> out;
  for (const ParamInfo& e : p.entries()) out.push_back(e.name);
  if (p.config().tie_word_embeddings) out.push_back(kTiedLmHeadName);
  return out;
}

// Indices of entries that differ between two manifests of the same layout.
std::set<std::string> changed_names(const std::vector<TensorDigest>& a, const std::vector<TensorDigest>& b,
                                    int* changed_entries = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  std::set<std::string> out;
  int n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].part, b[i].part);
    if (!(a[i] == b[i])) out.insert(a[i].name), ++n;
  }
  if (changed_entries) *changed_entries = n;
  return out;
}

const std::vector<std::string> kPlans = {"fp32",        "bf16",         "mxfp8",     "mxfp8-half",
                                         "mxfp8-floor", "fp8-block128", "fp8-tensor"};

TEST(Digest, SameParamsAndPlanGiveIdenticalManifests) {
  for (bool moe : {false, true}) {
    const ParamTable p = make_params(moe);
    for (const std::string& plan : kPlans) {
      const auto a = digests(p, plan);
      ThreadPool pool(3);
      const auto b = model_digests(Model(p, PrecisionPlan::named(plan), {&pool}));
      const auto c = digests(make_params(moe), plan);  // an independent but equal table
      EXPECT_EQ(a, b) << plan;
      EXPECT_EQ(a, c) << plan;
      EXPECT_TRUE(compare_digests(a, b).empty()) << plan;
      // And a different seed changes every entry's values but the norms' (all ones). (Scales may
      // coincide: a per-tensor FP8 scale is one BF16 amax / 448.)
      const auto d = digests(make_params(moe, 8), plan);
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].name.find("norm") == std::string::npos && a[i].part != "scales") {
          EXPECT_NE(a[i].xxh3, d[i].xxh3) << plan << " " << a[i].name;
        }
      }
    }
  }
}

TEST(Digest, CoverageInParameterTableOrder) {
  for (bool moe : {false, true}) {
    const ParamTable p = make_params(moe);
    for (const std::string& plan : kPlans) {
      const auto d = digests(p, plan);
      EXPECT_EQ(names_of(d), expected_names(p)) << plan;  // every tensor, once, in table order
      std::set<std::pair<std::string, std::string>> keys;
      for (const TensorDigest& t : d) EXPECT_TRUE(keys.emplace(t.name, t.part).second) << t.name << " " << t.part;
    }
  }
}

TEST(Digest, MoeListsEveryExpertAndTheRouter) {
  const ParamTable p = make_params(true);
  const auto d = digests(p, "mxfp8");
  const auto names = names_of(d);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  const ModelConfig& c = p.config();
  int experts = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".mlp.";
    if (l == 1) {  // the dense layer
      EXPECT_FALSE(has(pre + "gate.weight"));
      for (const char* m : {"gate_proj", "up_proj", "down_proj"}) EXPECT_TRUE(has(pre + m + ".weight"));
      continue;
    }
    EXPECT_TRUE(has(pre + "gate.weight")) << l;
    EXPECT_EQ(entry(d, pre + "gate.weight", "bf16").precision, "bf16");  // the router stays out of FP8
    for (int e = 0; e < c.num_experts; ++e)
      for (const char* m : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string n = pre + "experts." + std::to_string(e) + "." + m + ".weight";
        EXPECT_TRUE(has(n)) << n;
        EXPECT_EQ(entry(d, n, "codes").dtype, "F8_E4M3");
        EXPECT_EQ(entry(d, n, "scales").dtype, "F8_E8M0");
        ++experts;
      }
  }
  EXPECT_EQ(experts, 2 * 4 * 3);
  EXPECT_TRUE(has("lm_head.weight"));  // untied
  EXPECT_FALSE(has(kTiedLmHeadName));
}

TEST(Digest, PartsDtypesShapesPerPlan) {
  const ParamTable p = make_params(true);
  for (const std::string& plan : kPlans) {
    const PrecisionPlan pp = PrecisionPlan::named(plan);
    const auto d = digests(p, plan);
    for (const TensorDigest& t : d) {
      const ParamInfo* info = p.find(t.name);
      ASSERT_NE(info, nullptr) << t.name;
      EXPECT_EQ(t.bytes > 0, true);
      if (info->role != ParamRole::Linear) {
        EXPECT_EQ(t.shape, info->shape) << t.name;
        EXPECT_EQ(t.part, pp.bf16_embeddings ? "bf16" : "f32") << plan << " " << t.name;
        EXPECT_EQ(t.dtype, pp.bf16_embeddings ? "BF16" : "F32");
        EXPECT_EQ(t.precision, pp.bf16_embeddings ? "bf16" : "fp32");
        EXPECT_EQ(t.bytes, info->numel * (pp.bf16_embeddings ? 2 : 4));
        continue;
      }
      const LinearPrecision lp = pp.for_param(*info);
      const int64_t n = info->shape[0], k = info->shape[1];
      EXPECT_EQ(t.precision, lp.str()) << t.name;
      switch (lp.precision) {
        case Precision::FP32:
          EXPECT_EQ(t.part, "f32");
          EXPECT_EQ(t.dtype, "F32");
          EXPECT_EQ(t.bytes, n * k * 4);
          EXPECT_EQ(t.shape, info->shape);
          break;
        case Precision::BF16:
          EXPECT_EQ(t.part, "bf16");
          EXPECT_EQ(t.dtype, "BF16");
          EXPECT_EQ(t.bytes, n * k * 2);
          EXPECT_EQ(t.shape, info->shape);
          break;
        case Precision::MXFP8:
          if (t.part == "codes") {
            EXPECT_EQ(t.dtype, "F8_E4M3");
            EXPECT_EQ(t.shape, info->shape);
            EXPECT_EQ(t.bytes, n * k);
          } else {
            EXPECT_EQ(t.part, "scales");
            EXPECT_EQ(t.dtype, "F8_E8M0");
            EXPECT_EQ(t.shape, (std::vector<int64_t>{n, k / 32}));
            EXPECT_EQ(t.bytes, n * k / 32);
          }
          break;
        case Precision::FP8Tensor:
        case Precision::FP8Block128:
          if (t.part == "codes") {
            EXPECT_EQ(t.dtype, "F8_E4M3");
            EXPECT_EQ(t.shape, info->shape);
            EXPECT_EQ(t.bytes, n * k);
          } else {
            EXPECT_EQ(t.part, "scales");
            EXPECT_EQ(t.dtype, "F32");
            // Every matrix here is at most 96 x 64: one 128x128 tile, or one per-tensor scale.
            EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 1}));
            EXPECT_EQ(t.bytes, 4);
          }
          break;
      }
    }
  }
  // mxfp8 vs bf16: the decoder linears differ in parts, the router, lm_head and copies agree.
  const auto mx = digests(p, "mxfp8"), bf = digests(p, "bf16");
  const auto diff = compare_digests(bf, mx);
  int decoder_linears = 0;
  for (const ParamInfo& e : p.entries())
    if (e.role == ParamRole::Linear && e.linear != LinearKind::Router && e.linear != LinearKind::LmHead)
      ++decoder_linears;
  EXPECT_EQ(static_cast<int>(diff.size()), decoder_linears);
  for (const std::string& line : diff) {
    EXPECT_NE(line.find(": parts bf16(BF16"), std::string::npos) << line;
    EXPECT_NE(line.find("got codes(F8_E4M3"), std::string::npos) << line;
    EXPECT_NE(line.find("scales(F8_E8M0"), std::string::npos) << line;
  }
  // Blocked FP8 scales have one entry per 128x128 tile.
  ParamTable big(small_test_config(false));
  init_params(big, 1, 0.2f);
  const auto fb = digests(big, "fp8-block128");
  EXPECT_EQ(entry(fb, "model.layers.0.self_attn.q_proj.weight", "scales").shape, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(entry(fb, kTiedLmHeadName, "bf16").shape, (std::vector<int64_t>{96, 64}));
}

TEST(Digest, Fp6AndFp4CodesAreU8) {
  const ParamTable p = make_params(false);
  for (ElemType e : {ElemType::E2M3, ElemType::E3M2, ElemType::E2M1, ElemType::E5M2}) {
    PrecisionPlan plan = PrecisionPlan::named("mxfp8");
    plan.decoder.elem = e;
    const auto d = model_digests(Model(p, plan));
    const TensorDigest& c = entry(d, "model.layers.0.mlp.up_proj.weight", "codes");
    EXPECT_EQ(c.dtype, e == ElemType::E5M2 ? "F8_E5M2" : "U8");
    EXPECT_EQ(c.precision, std::string("mxfp8(") + elem_traits(e).name + ",rceil)");
  }
}

TEST(Digest, ChangingOneWeightChangesExactlyThatTensor) {
  for (bool moe : {false, true}) {
    const ParamTable base = make_params(moe);
    const std::vector<std::string> targets = {
        "model.layers.0.self_attn.q_proj.weight", "model.layers.1.post_attention_layernorm.weight",
        moe ? "model.layers.2.mlp.experts.3.down_proj.weight" : "model.layers.1.mlp.gate_proj.weight",
        moe ? "model.layers.0.mlp.gate.weight" : "model.layers.0.self_attn.k_norm.weight",
        moe ? "lm_head.weight" : "model.norm.weight"};
    for (const std::string& plan : kPlans) {
      const auto before = digests(base, plan);
      for (const std::string& target : targets) {
        ParamTable p = base;
        float* w = p.data(p.index_of(target));
        w[5] = w[5] + 4.0f;  // a new block maximum: MX / FP8 scales change too
        int n = 0;
        const auto after = digests(p, plan);
        EXPECT_EQ(changed_names(before, after, &n), std::set<std::string>{target}) << plan << " " << target;
        int parts = 0;
        for (const TensorDigest& t : before) parts += t.name == target;
        EXPECT_EQ(n, parts) << plan << " " << target << ": every part changes";
      }
    }
  }
}

TEST(Digest, DigestsAreOfWhatTheModelComputesWith) {
  // A change below half a BF16 ulp reaches an FP32 engine but not a BF16 one.
  const ParamTable base = make_params(false);
  const std::string target = "model.layers.0.self_attn.v_proj.weight";
  ParamTable p = base;
  float* w = p.data(p.index_of(target));
  w[3] = f32_from_bits(f32_bits(w[3]) ^ 1u);  // flip the last mantissa bit
  ASSERT_EQ(f32_to_bf16(w[3]), f32_to_bf16(base.data(base.index_of(target))[3]));
  EXPECT_EQ(changed_names(digests(base, "fp32"), digests(p, "fp32")), std::set<std::string>{target});
  for (const char* plan : {"bf16", "mxfp8", "fp8-tensor"})
    EXPECT_TRUE(changed_names(digests(base, plan), digests(p, plan)).empty()) << plan;
  // Compute copies: BF16 bits of the masters, or the FP32 masters themselves.
  const auto bf = digests(base, "mxfp8"), f32 = digests(base, "fp32");
  for (const ParamInfo& e : base.entries()) {
    if (e.role == ParamRole::Linear) continue;
    const float* m = base.data(base.index_of(e.name));
    EXPECT_EQ(entry(bf, e.name, "bf16").xxh3, xxh(bf16_of(m, e.numel))) << e.name;
    EXPECT_EQ(entry(f32, e.name, "f32").xxh3, xxh(std::vector<float>(m, m + e.numel))) << e.name;
  }
}

// Grid identity: MX codes and scales are the row (1x32) quantization of the
// BF16 compute copy with the plan's element type and scale rule; every other
// choice gives other bytes.
TEST(Digest, MxDigestsEqualAnIndependentQuantizationOfTheComputeCopy) {
  for (bool moe : {false, true}) {
    const ParamTable p = make_params(moe);
    const auto rceil = digests(p, "mxfp8"), floor = digests(p, "mxfp8-floor");
    int checked = 0, master_differs = 0, floor_differs = 0;
    for (const ParamInfo& e : p.entries()) {
      if (e.role != ParamRole::Linear || e.linear == LinearKind::Router || e.linear == LinearKind::LmHead) continue;
      const int64_t n = e.shape[0], k = e.shape[1];
      const float* master = p.data(p.index_of(e.name));
      const auto copy = bf16_of(master, e.numel);
      auto quant = [&](const void* src, InType in, MxConfig cfg) {
        std::vector<uint8_t> codes(n * k), scales(mx_num_scales(n, k, cfg.axis));
        mx_quantize(src, in, n, k, cfg, codes.data(), scales.data());
        return std::make_pair(xxh(codes), xxh(scales));
      };
      const MxConfig row{ElemType::E4M3, ScaleRule::RCeil, Axis::Row};
      const auto ref = quant(copy.data(), InType::BF16, row);
      EXPECT_EQ(entry(rceil, e.name, "codes").xxh3, ref.first) << e.name;
      EXPECT_EQ(entry(rceil, e.name, "scales").xxh3, ref.second) << e.name;
      ++checked;
      // Source: the FP32 master (double rounding differs from the BF16 copy's).
      const auto from_master = quant(master, InType::F32, row);
      master_differs += from_master.first != ref.first;
      // Scale rule: floor (differs in blocks whose amax significand exceeds 1.75).
      MxConfig fl = row;
      fl.rule = ScaleRule::Floor;
      const auto ref_floor = quant(copy.data(), InType::BF16, fl);
      EXPECT_EQ(entry(floor, e.name, "codes").xxh3, ref_floor.first) << e.name;
      EXPECT_EQ(entry(floor, e.name, "scales").xxh3, ref_floor.second) << e.name;
      floor_differs += ref_floor.second != ref.second;
      // Element type.
      MxConfig e5 = row;
      e5.elem = ElemType::E5M2;
      EXPECT_NE(quant(copy.data(), InType::BF16, e5).first, ref.first) << e.name;
      // Axis: col (32x1) blocks, where the shape allows.
      if (n % 32 == 0) {
        MxConfig col = row;
        col.axis = Axis::Col;
        const auto c = quant(copy.data(), InType::BF16, col);
        EXPECT_NE(c.first, ref.first) << e.name;
        EXPECT_NE(c.second, ref.second) << e.name;
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(master_differs, checked) << "quantizing the FP32 master must give other codes";
    EXPECT_GT(floor_differs, 0);
    // The same fault as a sampler would show it: re-quantized from the master.
    std::vector<TensorDigest> fault = rceil;
    const std::string q = "model.layers.0.self_attn.q_proj.weight";
    for (TensorDigest& t : fault)
      if (t.name == q && t.part == "codes") {
        const float* master = p.data(p.index_of(q));
        const int64_t n = p.find(q)->shape[0], k = p.find(q)->shape[1];
        std::vector<uint8_t> codes(n * k), scales(mx_num_scales(n, k, Axis::Row));
        mx_quantize(master, InType::F32, n, k, {}, codes.data(), scales.data());
        t.xxh3 = xxh(codes);
      }
    const auto lines = compare_digests(rceil, fault);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].rfind(q + " [codes]: xxh3 expected ", 0), 0u) << lines[0];
  }
}

TEST(Digest, TiedLmHeadAppearsOnceUnderItsOwnPrecision) {
  const ParamTable p = make_params(false);
  ASSERT_TRUE(p.config().tie_word_embeddings);
  const std::string embed = "model.embed_tokens.weight";
  const float* m = p.data(p.embed());
  for (const std::string& plan : kPlans) {
    const auto d = digests(p, plan);
    int head = 0, emb = 0;
    for (const TensorDigest& t : d) {
      head += t.name == kTiedLmHeadName;
      emb += t.name == embed;
      EXPECT_NE(t.name, "lm_head.weight");
    }
    const std::string part = plan == "fp32" ? "f32" : "bf16";
    EXPECT_EQ(head, 1) << plan;
    EXPECT_EQ(emb, 1) << plan;
    EXPECT_EQ(d.back().name, kTiedLmHeadName);  // after model.norm.weight
    EXPECT_EQ(d.back().precision, PrecisionPlan::named(plan).lm_head.str());
    // Same master, same BF16 rounding: the head's bytes equal the embedding copy's.
    EXPECT_EQ(entry(d, kTiedLmHeadName, part).xxh3, entry(d, embed, part).xxh3) << plan;
  }
  // An MX lm_head: codes and scales of the embedding's compute copy.
  PrecisionPlan plan = PrecisionPlan::named("mxfp8");
  plan.lm_head = plan.decoder;
  const auto d = model_digests(Model(p, plan));
  std::vector<uint8_t> codes(96 * 64), scales(96 * 2);
  const auto copy = bf16_of(m, 96 * 64);
  mx_quantize(copy.data(), InType::BF16, 96, 64, {}, codes.data(), scales.data());
  EXPECT_EQ(entry(d, kTiedLmHeadName, "codes").xxh3, xxh(codes));
  EXPECT_EQ(entry(d, kTiedLmHeadName, "scales").xxh3, xxh(scales));
  EXPECT_EQ(entry(d, embed, "bf16").xxh3, xxh(copy));
  // An embedding update moves both, and a sampler that left the head stale is caught.
  ParamTable q = p;
  q.data(q.embed())[10] += 1.0f;
  const auto fresh = model_digests(Model(q, plan));
  EXPECT_EQ(changed_names(d, fresh), (std::set<std::string>{embed, kTiedLmHeadName}));
  std::vector<TensorDigest> stale = fresh;
  for (TensorDigest& t : stale)
    if (t.name == kTiedLmHeadName) t = entry(d, kTiedLmHeadName, t.part);
  const auto lines = compare_digests(fresh, stale);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& l : lines) EXPECT_EQ(l.rfind(std::string(kTiedLmHeadName) + " [", 0), 0u) << l;
  // A tied model's manifest never matches an untied one's.
  ModelConfig untied_cfg = p.config();
  untied_cfg.tie_word_embeddings = false;
  ParamTable untied(untied_cfg);
  untied.storage().assign(untied.numel(), 0.0f);
  for (const ParamInfo& e : p.entries())
    std::copy(p.data(p.index_of(e.name)), p.data(p.index_of(e.name)) + e.numel, untied.data(untied.index_of(e.name)));
  std::copy(m, m + 96 * 64, untied.data(untied.lm_head()));
  const auto lines2 = compare_digests(digests(p, "mxfp8"), digests(untied, "mxfp8"));
  EXPECT_EQ(lines2,
            (std::vector<std::string>{"missing " + std::string(kTiedLmHeadName) + " (bf16(BF16 [96, 64]) [bf16])",
                                      "extra lm_head.weight (bf16(BF16 [96, 64]) [bf16])"}));
}

TEST(CompareDigests, ReportsASwappedPair) {
  // gate/up written in the wrong order (dense), and an expert written to the wrong slot (MoE).
  for (bool moe : {false, true}) {
    const ParamTable p = make_params(moe);
    const std::string a = moe ? "model.layers.2.mlp.experts.1.gate_proj.weight" : "model.layers.1.mlp.gate_proj.weight";
    const std::string b = moe ? "model.layers.2.mlp.experts.2.gate_proj.weight" : "model.layers.1.mlp.up_proj.weight";
    ParamTable s = p;
    std::swap_ranges(s.data(s.index_of(a)), s.data(s.index_of(a)) + s.find(a)->numel, s.data(s.index_of(b)));
    for (const char* plan : {"mxfp8", "bf16"}) {
      const auto lines = compare_digests(digests(p, plan), digests(s, plan));
      const std::vector<std::string> parts =
          std::string(plan) == "mxfp8" ? std::vector<std::string>{"codes", "scales"} : std::vector<std::string>{"bf16"};
      ASSERT_EQ(lines.size(), 2 * parts.size()) << fmt::format("{}", fmt::join(lines, "\n"));
      size_t i = 0;
      for (const auto& [name, other] : {std::pair{a, b}, std::pair{b, a}})
        for (const std::string& part : parts) {
          const std::string& l = lines[i++];
          EXPECT_EQ(l.rfind(name + " [" + part + "]: xxh3 expected ", 0), 0u) << l;
          EXPECT_NE(l.find("(the bytes expected for " + other + ")"), std::string::npos) << l;
        }
    }
  }
}

TEST(CompareDigests, ReportsMissingExtraAndDuplicateTensors) {
  const ParamTable p = make_params(true);
  const auto d = digests(p, "mxfp8");
  const std::string gone = "model.layers.2.mlp.experts.3.down_proj.weight";
  std::vector<TensorDigest> got;
  for (const TensorDigest& t : d)
    if (t.name != gone) got.push_back(t);
  auto lines = compare_digests(d, got);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "missing " + gone + " (codes(F8_E4M3 [64, 32]), scales(F8_E8M0 [64, 1]) [mxfp8(e4m3,rceil)])");
  // One part missing: the parts differ.
  got = d;
  got.erase(std::find_if(got.begin(), got.end(),
                         [&](const TensorDigest& t) { return t.name == gone && t.part == "scales"; }));
  lines = compare_digests(d, got);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind(gone + ": parts ", 0), 0u) << lines[0];
  // Something the learner does not send, and something written twice.
  got = d;
  TensorDigest extra = d.front();
  extra.name = "model.layers.0.mlp.experts.4.up_proj.weight";
  got.push_back(extra);
  got.push_back(d[3]);
  lines = compare_digests(d, got);
  ASSERT_EQ(lines.size(), 2u) << fmt::format("{}", fmt::join(lines, "\n"));
  EXPECT_EQ(lines[0], "duplicate " + d[3].name + " [" + d[3].part + "]: 2 times in got");
  EXPECT_EQ(lines[1].rfind("extra " + extra.name + " (", 0), 0u) << lines[1];
  EXPECT_TRUE(compare_digests(d, d).empty());
}

TEST(CompareDigests, ReportsHighPrecisionAndGridChanges) {
  const ParamTable p = make_params(true);
  // The FP32 router cast to BF16 in the sampler.
  PrecisionPlan learner = PrecisionPlan::named("mxfp8");
  learner.router = {Precision::FP32};
  auto lines = compare_digests(model_digests(Model(p, learner)), digests(p, "mxfp8"));
  ASSERT_EQ(lines.size(), 2u);  // two MoE layers
  EXPECT_EQ(lines[0],
            "model.layers.0.mlp.gate.weight: parts f32(F32 [4, 64]) [fp32] expected, got bf16(BF16 [4, 64]) [bf16]");
  EXPECT_EQ(lines[1].rfind("model.layers.2.mlp.gate.weight: parts f32(F32", 0), 0u);
  // Norms held in FP32 by the learner, down-cast by the sampler.
  PrecisionPlan f32_norms = PrecisionPlan::named("mxfp8");
  f32_norms.bf16_embeddings = false;
  lines = compare_digests(model_digests(Model(p, f32_norms)), digests(p, "mxfp8"));
  EXPECT_EQ(lines.size(), 1u + 3 * 4 + 1);  // embedding, 4 norms per layer, final norm
  for (const std::string& l : lines) EXPECT_NE(l.find("parts f32(F32"), std::string::npos) << l;
  // Another element type: a dtype change of the same part.
  PrecisionPlan e5 = PrecisionPlan::named("mxfp8");
  e5.overrides.push_back({{0}, {LinearKind::V}, {}, {Precision::MXFP8, ElemType::E5M2, ScaleRule::RCeil}});
  lines = compare_digests(digests(p, "mxfp8"), model_digests(Model(p, e5)));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "model.layers.0.self_attn.v_proj.weight [codes]: dtype expected F8_E4M3, got F8_E5M2");
  EXPECT_EQ(
      lines[1],
      "model.layers.0.self_attn.v_proj.weight [scales]: precision expected mxfp8(e4m3,rceil), got mxfp8(e5m2,rceil)");
  // Another scale rule: same dtypes and shapes, the precision says why.
  lines = compare_digests(digests(p, "mxfp8"), digests(p, "mxfp8-floor"));
  ASSERT_FALSE(lines.empty());
  for (const std::string& l : lines)
    EXPECT_NE(l.find(": precision expected mxfp8(e4m3,rceil), got mxfp8(e4m3,floor)"), std::string::npos) << l;
  // A shape change (a shard boundary or transposition).
  auto got = digests(p, "mxfp8");
  for (TensorDigest& t : got)
    if (t.name == "model.layers.1.self_attn.o_proj.weight" && t.part == "scales") t.shape = {4, 64};
  lines = compare_digests(digests(p, "mxfp8"), got);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "model.layers.1.self_attn.o_proj.weight [scales]: shape expected [64, 4], got [4, 64]");
}

TEST(Digest, JsonRoundTrip) {
  const ParamTable p = make_params(true);
  for (const char* plan : {"mxfp8", "fp32", "fp8-block128"}) {
    const auto d = digests(p, plan);
    const nlohmann::json j = digests_to_json(d);
    ASSERT_EQ(j.size(), d.size());
    EXPECT_EQ(j[0]["name"], "model.embed_tokens.weight");
    EXPECT_EQ(j[0]["xxh3"].get<std::string>().size(), 16u);
    EXPECT_EQ(digests_from_json(nlohmann::json::parse(j.dump())), d);
  }
  nlohmann::json bad = digests_to_json(digests(p, "bf16"));
  bad[2]["xxh3"] = "0x12";
  EXPECT_THROW(digests_from_json(bad), Error);
  bad = digests_to_json(digests(p, "bf16"));
  bad[1].erase("dtype");
  EXPECT_THROW(digests_from_json(bad), Error);
  EXPECT_THROW(digests_from_json(nlohmann::json::object()), Error);
  // No narrowing: a fractional or negative dimension, or a float byte count, is refused by entry and field.
  auto message = [](const nlohmann::json& j) {
    try {
      digests_from_json(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  bad = digests_to_json(digests(p, "bf16"));
  bad[1]["shape"] = {64, 2.5};
  EXPECT_EQ(message(bad), "digest manifest: entry [1] \"shape\"[1]: expected an integer, got 2.5 (number)");
  bad = digests_to_json(digests(p, "bf16"));
  bad[0]["shape"] = {-64};
  EXPECT_EQ(message(bad).rfind("digest manifest: entry [0] \"shape\"[0]: -64 is out of range", 0), 0u) << message(bad);
  bad = digests_to_json(digests(p, "bf16"));
  bad[3]["bytes"] = 4096.0;
  EXPECT_EQ(message(bad).rfind("digest manifest: entry [3] \"bytes\": expected an integer", 0), 0u) << message(bad);
}

}  // namespace
}  // namespace mxrl
