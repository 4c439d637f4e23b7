#include "sync/bundle.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/safetensors.h"
#include "model/precision.h"
#include "numerics/formats.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_read.h"
#include "util/text.h"

namespace mxrl {

namespace {

using nlohmann::json;

constexpr const char* kTiedHeadKey = "lm_head.weight";
constexpr const char* kMetaKeys[] = {"format", "version", "sync", "recipe", "plan", "config", "manifest"};

// A string from a file for a message: control characters escaped (one line), cut short.
std::string quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 160)) {
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 || u == 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  return out + (s.size() > 160 ? "...'" : "'");
}

// A message quoting file contents, kept to one line.
std::string one_line(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += u < 0x20 ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  return out;
}

// ---- building bundles ----

void add_part(Bundle& b, TensorDigest d, std::vector<std::byte> bytes) {
  d.bytes = static_cast<int64_t>(bytes.size());
  d.xxh3 = digest_bytes(bytes.data(), bytes.size());
  b.manifest.push_back(std::move(d));
  b.payload.push_back(std::move(bytes));
}

// A linear's held parts, byte for byte, under `name`.
void add_linear(Bundle& b, const PreparedLinear& L, const std::string& name) {
  for (const HeldPart& p : precision_traits(L.prec.precision).held_parts(L)) {
    const auto* data = static_cast<const std::byte*>(p.data);
    add_part(b, {name, p.part, dtype_name(p.dtype), p.shape, L.prec.str()},
             std::vector<std::byte>(data, data + p.bytes));
  }
}

// A compute copy as held: the BF16 bits of its (BF16-rounded) values, or its FP32 values.
std::vector<std::byte> copy_bytes(const float* v, int64_t n, bool bf16) {
  std::vector<std::byte> out(n * (bf16 ? sizeof(uint16_t) : sizeof(float)));
  if (!bf16) {
    std::memcpy(out.data(), v, out.size());
    return out;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

TensorDigest copy_entry(const std::string& name, const std::vector<int64_t>& shape, bool bf16) {
  if (bf16) return {name, "bf16", dtype_name(DType::BF16), shape, "bf16"};
  return {name, "f32", dtype_name(DType::F32), shape, "fp32"};
}

void add_copy(Bundle& b, const std::string& name, const std::vector<int64_t>& shape, const float* v, int64_t n,
              bool bf16) {
  add_part(b, copy_entry(name, shape, bf16), copy_bytes(v, n, bf16));
}

// The walk of model_digests order: every parameter in table order (a linear
// with its precision under `plan`, a compute copy with none), then the tied head.
template <typename F>
void for_each_slot(const ParamTable& t, const PrecisionPlan& plan, F&& f) {
  for (size_t i = 0; i < t.entries().size(); ++i) {
    const ParamInfo& p = t.entries()[i];
    if (p.role == ParamRole::Linear) {
      const LinearPrecision prec = plan.for_param(p);
      f(static_cast<int>(i), p, p.name, &prec);
    } else {
      f(static_cast<int>(i), p, p.name, nullptr);
    }
  }
  if (t.config().tie_word_embeddings) f(t.embed(), t.entries()[t.embed()], std::string(kTiedLmHeadName), &plan.lm_head);
}

// The learner's objects by checkpoint name.
struct LearnerView {
  std::unordered_map<std::string, const PreparedLinear*> linears;
  std::unordered_map<std::string, NamedBuffer> copies;
  const Model& model;
  explicit LearnerView(const Model& m) : model(m) {
    for (const PreparedLinear* L : m.linears()) linears.emplace(L->name, L);
    for (NamedBuffer& c : m.compute_copies()) copies.emplace(c.name, std::move(c));
  }
  const PreparedLinear& linear(const std::string& name, const ParamInfo& p) const {
    if (name == kTiedLmHeadName) return model.lm_head();
    auto it = linears.find(p.name);
    if (it == linears.end()) fail("sync: the learner model has no linear '{}'", p.name);
    return *it->second;
  }
  const NamedBuffer& copy(const std::string& name) const {
    auto it = copies.find(name);
    if (it == copies.end()) fail("sync: the learner model has no compute copy '{}'", name);
    return it->second;
  }
};

void check_same_layout(const Model& learner, const ParamTable& masters) {
  if (learner.param_names().size() != masters.entries().size())
    fail("sync: the learner model has {} parameters, the masters {}", learner.param_names().size(),
         masters.entries().size());
}

// ---- serialization ----

std::vector<std::byte> le64(uint64_t v) {
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(v >> (8 * i));
  return out;
}

json metadata(const Bundle& b) {
  return {{"format", kBundleFormat},
          {"version", std::to_string(b.version)},
          {"sync", sync_mode_name(b.mode)},
          {"recipe", b.recipe},
          {"plan", b.plan},
          {"config", b.config.dump()},
          {"manifest", digests_to_json(b.manifest).dump()}};
}

// The dtype a part may have.
bool part_dtype_ok(const std::string& part, const std::string& dtype) {
  if (part == "bf16") return dtype == "BF16";
  if (part == "f32") return dtype == "F32";
  if (part == "codes") return dtype == "F8_E4M3" || dtype == "F8_E5M2" || dtype == "U8";
  if (part == "scales") return dtype == "F8_E8M0" || dtype == "F32";
  return false;
}

std::string entry_at(const std::string& label, const TensorDigest& d) {
  return fmt::format("{}: {} [{}]", label, quote(d.name), quote(d.part));
}

// Checks a manifest entry on its own: a known part in a dtype that suits it,
// a byte count that matches the shape.
void check_entry(const TensorDigest& d, const std::string& at) {
  if (!part_dtype_ok(d.part, d.dtype)) {
    if (d.part != "codes" && d.part != "scales" && d.part != "bf16" && d.part != "f32")
      fail("{}: unknown part (codes, scales, bf16, f32)", at);
    fail("{}: dtype {} does not suit the part", at, quote(d.dtype));
  }
  uint64_t n = dtype_size(*dtype_from_name(d.dtype));
  for (int64_t s : d.shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(s), &n))
      fail("{}: shape {} is too large", at, shape_str(d.shape));
  if (n != static_cast<uint64_t>(d.bytes))
    fail("{}: {} bytes listed, but shape {} of {} needs {}", at, d.bytes, shape_str(d.shape), d.dtype, n);
}

// ---- parsing ----

uint64_t parse_version(const std::string& s, const std::string& label) {
  const bool digits =
      !s.empty() && s.size() <= 20 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || (s.size() > 1 && s[0] == '0'))
    fail("{}: __metadata__ \"version\" {} is not a decimal version number", label, quote(s));
  uint64_t v = 0;
  for (char c : s)
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v))
      fail("{}: __metadata__ \"version\" {} does not fit 64 bits", label, quote(s));
  return v;
}

Bundle read_metadata(const std::map<std::string, std::string>& m, const std::string& label) {
  auto get = [&](const char* key) -> const std::string& {
    auto it = m.find(key);
    if (it == m.end()) fail("{}: __metadata__ has no \"{}\"", label, key);
    return it->second;
  };
  auto fmt_it = m.find("format");
  if (fmt_it == m.end()) fail("{}: __metadata__ has no \"format\": not an mxrl sync bundle", label);
  if (fmt_it->second != kBundleFormat)
    fail("{}: __metadata__ \"format\" is {}, not '{}': not an mxrl sync bundle (or another version)", label,
         quote(fmt_it->second), kBundleFormat);
  for (const auto& entry : m) {
    const std::string& key = entry.first;  // not a structured binding: clang 14 cannot capture those
    if (std::find_if(std::begin(kMetaKeys), std::end(kMetaKeys), [&](const char* k) { return key == k; }) ==
        std::end(kMetaKeys))
      fail("{}: unknown __metadata__ key {}", label, quote(key));
  }
  Bundle b;
  b.version = parse_version(get("version"), label);
  try {
    b.mode = parse_sync_mode(get("sync"));
  } catch (const Error& e) {
    fail("{}: __metadata__ \"sync\": {}", label, e.what());
  }
  b.recipe = get("recipe");
  b.plan = get("plan");
  if (b.recipe.empty() || b.plan.empty()) fail("{}: __metadata__ \"recipe\" and \"plan\" must name plans", label);
  const std::string cfg_where = fmt::format("{}: __metadata__ \"config\"", label);
  try {
    b.config = json_parse(get("config"), cfg_where);
    ModelConfig::from_json(b.config, cfg_where);  // validates
  } catch (const Error& e) {
    throw Error(one_line(e.what()));
  }
  const json manifest = json_parse(get("manifest"), fmt::format("{}: __metadata__ \"manifest\"", label));
  try {
    b.manifest = digests_from_json(manifest);
  } catch (const Error& e) {
    fail("{}: __metadata__ \"manifest\": {}", label, one_line(e.what()));
  }
  return b;
}

// Each manifest entry against its tensor; every tensor listed.
void read_payload(const SafetensorsFile& f, Bundle& b, const std::string& label) {
  std::set<std::string> keys;
  for (const TensorDigest& d : b.manifest) {
    const std::string at = entry_at(label, d);
    check_entry(d, at);
    const std::string key = bundle_key(d);
    if (!keys.insert(key).second) fail("{}: listed twice in the manifest (key {})", at, quote(key));
    const TensorView* t = f.find(key);
    if (!t) fail("{}: no tensor {} in the file", at, quote(key));
    if (dtype_name(t->dtype) != d.dtype)
      fail("{}: tensor {} is {}, the manifest says {}", at, quote(key), dtype_name(t->dtype), d.dtype);
    if (t->shape != d.shape)
      fail("{}: tensor {} has shape {}, the manifest says {}", at, quote(key), shape_str(t->shape), shape_str(d.shape));
    if (static_cast<int64_t>(t->data.size()) != d.bytes)
      fail("{}: tensor {} holds {} bytes, the manifest says {}", at, quote(key), t->data.size(), d.bytes);
    const uint64_t h = digest_bytes(t->data.data(), t->data.size());
    if (h != d.xxh3)
      fail("{}: the bytes of tensor {} hash to xxh3 {:016x}, the manifest says {:016x}", at, quote(key), h, d.xxh3);
    b.payload.emplace_back(t->data.begin(), t->data.end());
  }
  for (const TensorView& t : f.tensors())
    if (!keys.count(t.name)) fail("{}: tensor {} is not in the manifest", label, quote(t.name));
}

// ---- decoding ----

std::string at_version(const Bundle& b) { return fmt::format("bundle v{}", b.version); }

void check_target(const Bundle& b, SyncMode want, const ModelConfig& cfg) {
  if (b.mode != want) fail("{}: a {} bundle, expected {}", at_version(b), sync_mode_name(b.mode), sync_mode_name(want));
  // The model's shape, not the dtype its checkpoint was stored in.
  auto shape_of = [](json j) {
    j.erase("torch_dtype"), j.erase("dtype");
    return j;
  };
  const json mine = shape_of(cfg.to_json());
  const json theirs = shape_of(ModelConfig::from_json(b.config, at_version(b) + " config").to_json());
  if (mine == theirs) return;
  for (const auto& [key, v] : mine.items())
    if (!theirs.contains(key) || theirs[key] != v)
      fail("{}: for another model: config \"{}\" is {} in the bundle, {} here", at_version(b), key,
           theirs.contains(key) ? json_brief(theirs[key]) : "absent", json_brief(v));
  fail("{}: for another model: its config has keys this model's lacks", at_version(b));
}

template <typename T>
void assign_bytes(std::vector<T>& dst, const std::vector<std::byte>& src) {
  dst.resize(src.size() / sizeof(T));
  std::memcpy(dst.data(), src.data(), dst.size() * sizeof(T));
}

// One compute copy (a bf16 BF16 or f32 F32 part of the parameter's shape) into dst.
void decode_copy(const Bundle& b, size_t i, const ParamInfo& p, float* dst) {
  const TensorDigest& d = b.manifest[i];
  const std::vector<std::byte>& bytes = b.payload[i];
  const std::string at = fmt::format("{}: {} [{}]", at_version(b), quote(d.name), quote(d.part));
  if (d.shape != p.shape) fail("{}: shape {}, the model needs {}", at, shape_str(d.shape), shape_str(p.shape));
  const bool bf16 = d.part == "bf16" && d.dtype == "BF16" && d.precision == "bf16";
  const bool f32 = d.part == "f32" && d.dtype == "F32" && d.precision == "fp32";
  if (!bf16 && !f32)
    fail("{}: {} {} is not a compute copy (bf16 BF16 or f32 F32 fp32)", at, quote(d.dtype), quote(d.precision));
  const size_t size = bf16 ? sizeof(uint16_t) : sizeof(float);
  if (bytes.size() != static_cast<size_t>(p.numel) * size)
    fail("{}: {} bytes, the model needs {}", at, bytes.size(), p.numel * size);
  if (f32) {
    std::memcpy(dst, bytes.data(), bytes.size());
    return;
  }
  for (int64_t j = 0; j < p.numel; ++j) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * j, 2);
    dst[j] = bf16_to_f32(h);
  }
}

// One linear from its parts; what it then holds must be exactly the listed parts.
PreparedLinear decode_linear(const Bundle& b, const std::vector<size_t>& parts, const ParamInfo& p) {
  const std::string& name = b.manifest[parts[0]].name;
  PreparedLinear L;
  L.name = p.name;
  L.n = p.shape[0];
  L.k = p.shape[1];
  try {
    L.prec = LinearPrecision::parse(b.manifest[parts[0]].precision);
  } catch (const Error& e) {
    fail("{}: {}: {}", at_version(b), quote(name), e.what());
  }
  const bool mx = precision_traits(L.prec.precision).wformat == WFormat::MX;
  std::vector<TensorDigest> listed;
  for (size_t i : parts) {
    const TensorDigest& d = b.manifest[i];
    const std::vector<std::byte>& bytes = b.payload[i];
    if (d.part == "f32")
      assign_bytes(L.f32, bytes);
    else if (d.part == "bf16")
      assign_bytes(L.bf16, bytes);
    else if (d.part == "codes")
      assign_bytes(L.codes, bytes);
    else if (d.part == "scales" && mx)
      assign_bytes(L.mx_scales, bytes);
    else if (d.part == "scales")
      assign_bytes(L.fp8_scales, bytes);
    listed.push_back(d);
  }
  const std::vector<std::string> diff = compare_digests(listed, linear_digests(L, name));
  if (!diff.empty())
    fail("{}: does not hold what a {} linear [{}, {}] holds: {}", at_version(b), L.prec.str(), L.n, L.k, diff.front());
  return L;
}

// Manifest indices by name, names in first-appearance order.
std::vector<std::pair<std::string, std::vector<size_t>>> group_by_name(const Bundle& b) {
  std::vector<std::pair<std::string, std::vector<size_t>>> out;
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < b.manifest.size(); ++i) {
    auto [it, fresh] = at.try_emplace(b.manifest[i].name, out.size());
    if (fresh) out.push_back({b.manifest[i].name, {}});
    out[it->second].second.push_back(i);
  }
  return out;
}

void check_sizes(const Bundle& b) {
  if (b.manifest.size() != b.payload.size())
    fail("{}: {} manifest entries but {} payload parts", at_version(b), b.manifest.size(), b.payload.size());
}

}  // namespace

const char* sync_mode_name(SyncMode m) { return m == SyncMode::Ship ? "ship" : "requantize"; }

SyncMode parse_sync_mode(const std::string& s) {
  if (s == "ship") return SyncMode::Ship;
  if (s == "requantize") return SyncMode::Requantize;
  fail("unknown sync mode {} (ship, requantize)", quote(s));
}

std::string bundle_key(const TensorDigest& d) {
  const std::string base = d.name == kTiedLmHeadName ? kTiedHeadKey : d.name;
  return d.part == "scales" ? base + "_scale" : base;  // q_proj.weight -> q_proj.weight_scale
}

void check_ship_compatible(const PrecisionPlan& learner, const PrecisionPlan& sampler, const ModelConfig& cfg) {
  const char* hint = "a ship bundle carries the learner's own weights or BF16 copies (use --sync requantize)";
  if (learner.bf16_embeddings != sampler.bf16_embeddings)
    fail("ship: embeddings and norms are {} on the learner (plan {}) but {} on the sampler (plan {}); {}",
         learner.bf16_embeddings ? "bf16" : "fp32", learner.name, sampler.bf16_embeddings ? "bf16" : "fp32",
         sampler.name, hint);
  const ParamTable layout(cfg, /*allocate=*/false);
  for_each_slot(layout, sampler, [&](int, const ParamInfo& p, const std::string& name, const LinearPrecision* s) {
    if (!s) return;
    const LinearPrecision l = name == kTiedLmHeadName ? learner.lm_head : learner.for_param(p);
    if (*s == l || s->precision == Precision::BF16) return;
    fail("ship: {} is {} on the learner (plan {}) but {} on the sampler (plan {}); {}", name, l.str(), learner.name,
         s->str(), sampler.name, hint);
  });
}

Bundle make_ship_bundle(const Model& learner, const ParamTable& masters, const PrecisionPlan& sampler_plan,
                        uint64_t version, const Exec& exec) {
  check_same_layout(learner, masters);
  check_ship_compatible(learner.plan(), sampler_plan, learner.config());
  const LearnerView mine(learner);
  Bundle b;
  b.version = version;
  b.mode = SyncMode::Ship;
  b.recipe = learner.plan().name;
  b.plan = sampler_plan.name;
  b.config = learner.config().to_json();
  const bool bf16 = sampler_plan.bf16_embeddings;
  for_each_slot(
      masters, sampler_plan, [&](int i, const ParamInfo& p, const std::string& name, const LinearPrecision* want) {
        if (!want) {
          const NamedBuffer& c = mine.copy(p.name);
          add_copy(b, c.name, c.shape, c.data, c.numel, bf16);
          return;
        }
        const PreparedLinear& have = mine.linear(name, p);
        if (have.prec == *want)
          add_linear(b, have, name);
        else
          add_linear(b, PreparedLinear::prepare(p.name, masters.data(i), p.shape[0], p.shape[1], *want, exec), name);
      });
  return b;
}

Bundle make_requantize_bundle(const ParamTable& masters, const PrecisionPlan& learner_plan, uint64_t version) {
  Bundle b;
  b.version = version;
  b.mode = SyncMode::Requantize;
  b.recipe = b.plan = learner_plan.name;
  b.config = masters.config().to_json();
  masters.for_each([&](const ParamInfo& p, const float* w) {
    const bool bf16 = p.role == ParamRole::Linear ? learner_plan.for_param(p).precision != Precision::FP32
                                                  : learner_plan.bf16_embeddings;
    add_copy(b, p.name, p.shape, w, p.numel, bf16);
  });
  return b;
}

Bundle export_bundle(const ParamTable& masters, const PrecisionPlan& learner_plan, SyncMode mode,
                     const PrecisionPlan& sampler_plan, uint64_t version, const Exec& exec) {
  if (mode == SyncMode::Requantize) return make_requantize_bundle(masters, learner_plan, version);
  check_ship_compatible(learner_plan, sampler_plan, masters.config());
  const Model learner(masters, learner_plan, exec);
  return make_ship_bundle(learner, masters, sampler_plan, version, exec);
}

json bundle_summary(const Bundle& b) {
  return {
      {"format", kBundleFormat}, {"version", b.version}, {"sync", sync_mode_name(b.mode)},         {"recipe", b.recipe},
      {"plan", b.plan},          {"config", b.config},   {"manifest", digests_to_json(b.manifest)}};
}

std::vector<TensorDigest> expected_manifest(const Model& learner, const ParamTable& masters,
                                            const PrecisionPlan& sampler_plan, const Exec& exec) {
  check_same_layout(learner, masters);
  const LearnerView mine(learner);
  const bool bf16 = sampler_plan.bf16_embeddings;
  const bool learner_copies = learner.plan().bf16_embeddings == bf16;
  std::vector<TensorDigest> out;
  for_each_slot(
      masters, sampler_plan, [&](int i, const ParamInfo& p, const std::string& name, const LinearPrecision* want) {
        if (!want) {
          const float* v = learner_copies ? mine.copy(p.name).data : masters.data(i);
          const std::vector<std::byte> bytes = copy_bytes(v, p.numel, bf16);
          TensorDigest d = copy_entry(p.name, p.shape, bf16);
          d.bytes = static_cast<int64_t>(bytes.size());
          d.xxh3 = digest_bytes(bytes.data(), bytes.size());
          out.push_back(std::move(d));
          return;
        }
        const PreparedLinear& have = mine.linear(name, p);
        const std::vector<TensorDigest> ds =
            have.prec == *want
                ? linear_digests(have, name)
                : linear_digests(PreparedLinear::prepare(p.name, masters.data(i), p.shape[0], p.shape[1], *want, exec),
                                 name);
        out.insert(out.end(), ds.begin(), ds.end());
      });
  return out;
}

std::vector<std::byte> serialize(const Bundle& b) {
  check_sizes(b);
  json header = json::object();
  header["__metadata__"] = metadata(b);
  uint64_t offset = 0;
  for (size_t i = 0; i < b.manifest.size(); ++i) {
    const TensorDigest& d = b.manifest[i];
    const std::string at = entry_at("serialize", d);
    check_entry(d, at);
    if (static_cast<int64_t>(b.payload[i].size()) != d.bytes)
      fail("{}: {} payload bytes, the manifest says {}", at, b.payload[i].size(), d.bytes);
    const std::string key = bundle_key(d);
    if (header.contains(key)) fail("{}: key {} used twice", at, quote(key));
    header[key] = {{"dtype", d.dtype}, {"shape", d.shape}, {"data_offsets", {offset, offset + d.bytes}}};
    offset += d.bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // names must be valid UTF-8
    fail("serialize: cannot encode the header: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data region starts 8-aligned
  std::vector<std::byte> out = le64(text.size());
  out.reserve(8 + text.size() + offset);
  const auto* t = reinterpret_cast<const std::byte*>(text.data());
  out.insert(out.end(), t, t + text.size());
  for (const auto& p : b.payload) out.insert(out.end(), p.begin(), p.end());
  return out;
}

namespace {
Bundle from_file(const SafetensorsFile& f) {
  Bundle b = read_metadata(f.metadata(), f.path());
  read_payload(f, b, f.path());
  return b;
}
}  // namespace

Bundle parse_bundle(std::span<const std::byte> bytes, const std::string& label) {
  return from_file(SafetensorsFile::parse(bytes, label));
}

void write_bundle(const Bundle& b, const std::string& path) {
  const std::vector<std::byte> bytes = serialize(b);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

Bundle read_bundle(const std::string& path) { return from_file(SafetensorsFile::open(path)); }

WeightShipment bundle_to_shipment(const Bundle& b, const ModelConfig& cfg) {
  check_sizes(b);
  check_target(b, SyncMode::Ship, cfg);
  const ParamTable layout(cfg, /*allocate=*/false);
  const ParamInfo& embed = layout.entries()[layout.embed()];
  WeightShipment s;
  for (const auto& [name, parts] : group_by_name(b)) {
    const bool tied_head = cfg.tie_word_embeddings && name == kTiedLmHeadName;
    const ParamInfo* p = tied_head ? &embed : layout.find(name);
    if (!p) fail("{}: {} is not a tensor of this model", at_version(b), quote(name));
    if (tied_head || p->role == ParamRole::Linear) {
      s.linears.emplace(p->name, decode_linear(b, parts, *p));
      continue;
    }
    if (parts.size() != 1)
      fail("{}: {} has {} parts, a compute copy has one", at_version(b), quote(name), parts.size());
    std::vector<float>& v = s.copies[p->name];
    v.resize(p->numel);
    decode_copy(b, parts[0], *p, v.data());
  }
  for (const ParamInfo& p : layout.entries()) {
    const bool linear = p.role == ParamRole::Linear;
    if (!(linear ? s.linears.count(p.name) : s.copies.count(p.name)))
      fail("{}: no {} for '{}'", at_version(b), linear ? "linear" : "compute copy", p.name);
  }
  if (cfg.tie_word_embeddings && !s.linears.count(embed.name))
    fail("{}: no linear for '{}'", at_version(b), kTiedLmHeadName);
  return s;
}

ParamTable bundle_to_params(const Bundle& b, const ModelConfig& cfg) {
  check_sizes(b);
  check_target(b, SyncMode::Requantize, cfg);
  ParamTable t(cfg);
  std::vector<char> seen(t.entries().size(), 0);
  for (size_t i = 0; i < b.manifest.size(); ++i) {
    const int idx = t.index_of(b.manifest[i].name);
    if (idx < 0) fail("{}: {} is not a parameter of this model", at_version(b), quote(b.manifest[i].name));
    if (seen[idx]++) fail("{}: '{}' listed twice", at_version(b), b.manifest[i].name);
    decode_copy(b, i, t.entries()[idx], t.data(idx));
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) fail("{}: no tensor '{}'", at_version(b), t.entries()[i].name);
  return t;
}

}  // namespace mxrl
