#include "interop/engine_dump.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/safetensors.h"
#include "model/precision.h"
#include "numerics/formats.h"
#include "sync/bundle.h"
#include "util/error.h"
#include "util/text.h"

namespace mxrl {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ---- what a model holds, part by part, with its bytes ----

struct Held {
  TensorDigest d;  // name (kTiedLmHeadName for a tied head), part, dtype, shape, precision
  std::vector<std::byte> bytes;
};

std::vector<Held> held_tensors(const Model& m) {
  std::map<std::pair<std::string, std::string>, std::vector<std::byte>> bytes;
  const bool tied = m.config().tie_word_embeddings;
  const bool bf16 = m.plan().bf16_embeddings;
  m.for_each_tensor([&](const ModelTensor& t) {
    if (const PreparedLinear* L = t.linear) {
      const std::string name = tied && L == &m.lm_head() ? std::string(kTiedLmHeadName) : L->name;
      for (const HeldPart& p : precision_traits(L->prec.precision).held_parts(*L)) {
        const auto* b = static_cast<const std::byte*>(p.data);
        bytes[{name, p.part}].assign(b, b + p.bytes);
      }
      return;
    }
    const NamedBuffer& c = *t.copy;
    std::vector<std::byte>& out = bytes[{c.name, bf16 ? "bf16" : "f32"}];
    out.resize(static_cast<size_t>(c.numel) * (bf16 ? 2 : 4));
    if (!bf16) {
      std::memcpy(out.data(), c.data, out.size());
      return;
    }
    for (int64_t i = 0; i < c.numel; ++i) {
      const uint16_t h = f32_to_bf16(c.data[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  });
  std::vector<Held> out;
  for (const TensorDigest& d : model_digests(m)) {  // manifest order
    auto it = bytes.find({d.name, d.part});
    if (it == bytes.end()) fail("write_dump: no bytes for {} [{}]", d.name, d.part);
    out.push_back({d, std::move(it->second)});
  }
  return out;
}

DType dtype_of(const std::string& name) {
  const auto d = dtype_from_name(name);
  if (!d) fail("write_dump: unknown dtype {}", name);
  return *d;
}

// ---- vLLM's layout ----

std::string layer_prefix(int64_t i) { return fmt::format("model.layers.{}.", i); }

struct VllmWriter {
  SafetensorsWriter w;
  std::unordered_map<std::string, std::vector<const Held*>> by_name;
  std::vector<std::string> order;
  std::map<std::string, bool> used;

  explicit VllmWriter(const std::vector<Held>& held) {
    for (const Held& h : held) {
      auto [it, fresh] = by_name.try_emplace(h.d.name);
      if (fresh) order.push_back(h.d.name);
      it->second.push_back(&h);
    }
  }
  static std::string key(const std::string& param, const TensorDigest& d) {
    return d.part == "scales" ? param + "_scale" : param;
  }
  // MX scales as U8 (compressed-tensors / vLLM), everything else as held.
  static DType out_dtype(const TensorDigest& d) { return d.dtype == "F8_E8M0" ? DType::U8 : dtype_of(d.dtype); }
  const std::vector<const Held*>& parts(const std::string& name) {
    auto it = by_name.find(name);
    if (it == by_name.end()) fail("write_dump: the model has no tensor {}", name);
    return it->second;
  }
  // Members concatenated along rows (the output dim), part by part, as one
  // tensor; with `stack` > 0, `stack` groups of members stacked on a new
  // leading dim (FusedMoE's [E, rows, cols]).
  void fuse(const std::vector<std::string>& members, const std::string& param, int64_t stack = 0) {
    const std::vector<const Held*>& first = parts(members.front());
    for (const std::string& m : members) {
      const std::vector<const Held*>& p = parts(m);
      bool same = p.size() == first.size();
      for (size_t i = 0; same && i < p.size(); ++i)
        same = p[i]->d.part == first[i]->d.part && p[i]->d.dtype == first[i]->d.dtype &&
               p[i]->d.precision == first[i]->d.precision && p[i]->d.shape.size() == 2 &&
               p[i]->d.shape[1] == first[i]->d.shape[1];
      if (!same)
        fail("write_dump: vLLM fuses {} into {}, but {} is held as {} and {} as {}", fmt::join(members, ", "), param,
             members.front(), first.front()->d.precision, m, p.front()->d.precision);
    }
    for (size_t i = 0; i < first.size(); ++i) {
      const TensorDigest& d0 = first[i]->d;
      if (d0.part == "scales" && d0.dtype == "F32")
        fail("write_dump: {} is on an FP8 grid with F32 scales, which vLLM keeps per shard of {}; not written",
             members.front(), param);
      std::vector<std::byte> bytes;
      int64_t rows = 0;
      for (const std::string& m : members) {
        const Held& h = *parts(m)[i];
        bytes.insert(bytes.end(), h.bytes.begin(), h.bytes.end());
        rows += h.d.shape[0];
      }
      std::vector<int64_t> shape = {rows, d0.shape[1]};
      if (stack > 0) shape = {stack, rows / stack, d0.shape[1]};
      w.add(key(param, d0), out_dtype(d0), shape, std::move(bytes));
    }
    for (const std::string& m : members) used[m] = true;
  }
  void plain(const std::string& name) {
    for (const Held* h : parts(name)) w.add(key(name, h->d), out_dtype(h->d), h->d.shape, h->bytes);
    used[name] = true;
  }
};

void write_vllm(const Model& model, const std::vector<Held>& held, const std::string& path) {
  const ModelConfig& cfg = model.config();
  VllmWriter v(held);
  v.used[kTiedLmHeadName] = true;  // vLLM's lm_head is the embed_tokens tensor
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = layer_prefix(i);
    v.fuse({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"},
           p + "self_attn.qkv_proj.weight");
    if (!cfg.is_moe_layer(i)) {
      v.fuse({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, p + "mlp.gate_up_proj.weight");
      continue;
    }
    std::vector<std::string> w13, w2;
    for (int64_t e = 0; e < cfg.num_experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
      w13.push_back(x + "gate_proj.weight");
      w13.push_back(x + "up_proj.weight");
      w2.push_back(x + "down_proj.weight");
    }
    v.fuse(w13, p + "mlp.experts.w13_weight", cfg.num_experts);
    v.fuse(w2, p + "mlp.experts.w2_weight", cfg.num_experts);
  }
  for (const std::string& name : v.order)
    if (!v.used.count(name)) v.plain(name);
  v.w.set_metadata({{"format", "pt"}, {"mxrl.naming", "vllm"}, {"mxrl.plan", model.plan().name}});
  v.w.write(path);
}

// ---- reading ----

struct Piece {
  std::string name, part;
  std::string dtype;  // as listed in the manifest (MX scales: F8_E8M0)
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

struct Dump {
  SafetensorsFile file;
  std::deque<std::vector<std::byte>> owned;  // bytes made here (the tied head of a vLLM dump)
  std::vector<Piece> pieces;
  std::vector<TensorDigest> manifest;
};

std::string part_of(const TensorView& t, bool scale) {
  if (scale) return "scales";
  switch (t.dtype) {
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F8_E4M3:
    case DType::F8_E5M2:
    case DType::U8: return "codes";
    default: return fmt::format("{}", dtype_name(t.dtype));  // not a part mxrl holds: a mismatch
  }
}

std::string listed_dtype(DType d, bool scale) {
  if (scale && (d == DType::U8 || d == DType::F8_E8M0)) return "F8_E8M0";
  return dtype_name(d);
}

// Splits tensor t (rows along dim `dim`: 0 for [rows, cols], 1 for [E, rows, cols]) into named row blocks.
void split_rows(const std::string& path, const TensorView& t, bool scale,
                const std::vector<std::pair<std::string, int64_t>>& blocks, bool stacked, std::vector<Piece>& out) {
  const size_t rank = stacked ? 3 : 2;
  int64_t want = 0;
  for (const auto& b : blocks) want += b.second;
  const int64_t groups = stacked && t.shape.size() == 3 ? t.shape[0] : 1;
  std::vector<std::string> sizes;
  for (const auto& b : blocks) sizes.push_back(std::to_string(b.second));
  if (t.shape.size() != rank || (stacked ? groups * t.shape[1] : t.shape[0]) != want)
    fail("{}: {}: shape {} cannot be split into the config's {} rows ({}){}", path, t.name, shape_str(t.shape), want,
         fmt::join(sizes, " + "), stacked ? ", stacked by expert" : "");
  const int64_t cols = t.shape[rank - 1];
  const size_t row_bytes = dtype_size(t.dtype) * static_cast<size_t>(cols);
  size_t at = 0;
  for (const auto& [name, rows] : blocks) {
    const size_t n = row_bytes * static_cast<size_t>(rows);
    out.push_back({name, part_of(t, scale), listed_dtype(t.dtype, scale), {rows, cols}, t.data.subspan(at, n)});
    at += n;
  }
}

void read_vllm(const std::string& path, const ParamTable& layout, Dump& dump) {
  std::vector<Piece>& out = dump.pieces;
  const ModelConfig& cfg = layout.config();
  auto rows_of = [&](const std::string& name) -> int64_t {
    const ParamInfo* p = layout.find(name);
    return p ? p->shape[0] : -1;
  };
  for (const TensorView& t : dump.file.tensors()) {
    const bool scale = ends_with(t.name, "_scale");
    const std::string base = scale ? t.name.substr(0, t.name.size() - 6) : t.name;
    const auto fused = [&](const std::string& suffix) {
      return ends_with(base, suffix) ? base.substr(0, base.size() - suffix.size()) : std::string();
    };
    if (std::string p = fused("self_attn.qkv_proj.weight"); !p.empty() && rows_of(p + "self_attn.q_proj.weight") > 0) {
      split_rows(path, t, scale,
                 {{p + "self_attn.q_proj.weight", cfg.q_dim()},
                  {p + "self_attn.k_proj.weight", cfg.kv_dim()},
                  {p + "self_attn.v_proj.weight", cfg.kv_dim()}},
                 false, out);
      continue;
    }
    if (std::string p = fused("mlp.gate_up_proj.weight"); !p.empty() && rows_of(p + "mlp.gate_proj.weight") > 0) {
      const int64_t i = rows_of(p + "mlp.gate_proj.weight");
      split_rows(path, t, scale, {{p + "mlp.gate_proj.weight", i}, {p + "mlp.up_proj.weight", i}}, false, out);
      continue;
    }
    const bool w13 = !fused("mlp.experts.w13_weight").empty(), w2 = !fused("mlp.experts.w2_weight").empty();
    if (w13 || w2) {
      const std::string p = fused(w13 ? "mlp.experts.w13_weight" : "mlp.experts.w2_weight");
      const std::string first = p + (w13 ? "mlp.experts.0.gate_proj.weight" : "mlp.experts.0.down_proj.weight");
      if (rows_of(first) > 0) {
        std::vector<std::pair<std::string, int64_t>> blocks;
        for (int64_t e = 0; e < cfg.num_experts; ++e) {
          const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
          if (w13) {
            blocks.emplace_back(x + "gate_proj.weight", rows_of(x + "gate_proj.weight"));
            blocks.emplace_back(x + "up_proj.weight", rows_of(x + "up_proj.weight"));
          } else {
            blocks.emplace_back(x + "down_proj.weight", rows_of(x + "down_proj.weight"));
          }
        }
        if (t.shape.size() == 3 && t.shape[0] != cfg.num_experts)
          fail("{}: {}: shape {} holds {} experts, the config {}", path, t.name, shape_str(t.shape), t.shape[0],
               cfg.num_experts);
        split_rows(path, t, scale, blocks, true, out);
        continue;
      }
    }
    out.push_back({scale && ends_with(base, ".weight") ? base : t.name, part_of(t, scale && ends_with(base, ".weight")),
                   listed_dtype(t.dtype, scale), t.shape, t.data});
  }
}

void read_mxrl(const ModelConfig& cfg, Dump& dump) {
  for (const TensorView& t : dump.file.tensors()) {
    const bool scale = ends_with(t.name, ".weight_scale");
    std::string base = scale ? t.name.substr(0, t.name.size() - 6) : t.name;
    if (cfg.tie_word_embeddings && base == "lm_head.weight") base = kTiedLmHeadName;
    dump.pieces.push_back({base, part_of(t, scale), listed_dtype(t.dtype, scale), t.shape, t.data});
  }
}

LinearPrecision planned(const ParamTable& layout, const PrecisionPlan& plan, const std::string& name, bool* known) {
  if (name == kTiedLmHeadName) return *known = true, plan.lm_head;
  const ParamInfo* p = layout.find(name);
  *known = p && p->role == ParamRole::Linear;
  return *known ? plan.for_param(*p) : LinearPrecision{Precision::MXFP8};
}

ElemType elem_of(const std::string& dtype, ElemType fallback) {
  if (dtype == "F8_E4M3") return ElemType::E4M3;
  if (dtype == "F8_E5M2") return ElemType::E5M2;
  return fallback;
}

// The precision label of one tensor from its parts (see read_dump_manifest).
std::string infer_precision(const std::vector<const Piece*>& parts, const ParamTable& layout,
                            const PrecisionPlan& plan) {
  const Piece *codes = nullptr, *scales = nullptr;
  for (const Piece* p : parts) {
    if (p->part == "codes") codes = p;
    if (p->part == "scales") scales = p;
  }
  if (parts.size() == 1 && parts[0]->part == "bf16") return "bf16";
  if (parts.size() == 1 && parts[0]->part == "f32") return "fp32";
  if (!codes || !scales || parts.size() != 2) return "unknown";
  bool known = false;
  const LinearPrecision want = planned(layout, plan, codes->name, &known);
  const WFormat wf = precision_traits(want.precision).wformat;
  LinearPrecision p;
  if (scales->dtype == "F8_E8M0") {
    p.precision = Precision::MXFP8;
    p.elem = elem_of(codes->dtype, wf == WFormat::MX ? want.elem : ElemType::E4M3);
    p.rule = wf == WFormat::MX ? want.rule : ScaleRule::RCeil;
  } else if (scales->dtype == "F32") {
    if (wf == WFormat::FP8)
      p.precision = want.precision;
    else
      p.precision = scales->shape == std::vector<int64_t>{1, 1} ? Precision::FP8Tensor : Precision::FP8Block128;
    p.elem = elem_of(codes->dtype, ElemType::E4M3);
  } else {
    return "unknown";
  }
  return p.str();
}

int part_rank(const std::string& part) {
  static const char* order[] = {"codes", "scales", "bf16", "f32"};
  for (int i = 0; i < 4; ++i)
    if (part == order[i]) return i;
  return 4;
}

std::vector<float> values_f32(const Piece& p) {
  const int64_t n = static_cast<int64_t>(p.bytes.size() / (p.dtype == "BF16" ? 2 : 4));
  std::vector<float> v(static_cast<size_t>(n));
  if (p.dtype == "F32") {
    std::memcpy(v.data(), p.bytes.data(), p.bytes.size());
    return v;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p.bytes.data() + 2 * i, 2);
    v[i] = bf16_to_f32(h);
  }
  return v;
}

Dump read_dump(const std::string& path, const ModelConfig& cfg, const PrecisionPlan& plan, Naming naming) {
  Dump dump{SafetensorsFile::open(path), {}, {}, {}};
  const ParamTable layout(cfg, /*allocate=*/false);
  if (naming == Naming::Vllm) {
    read_vllm(path, layout, dump);
  } else {
    read_mxrl(cfg, dump);
  }
  // Group by name.
  std::vector<std::string> order;
  std::unordered_map<std::string, std::vector<const Piece*>> by_name;
  for (const Piece& p : dump.pieces) {
    auto [it, fresh] = by_name.try_emplace(p.name);
    if (fresh) order.push_back(p.name);
    it->second.push_back(&p);
  }
  std::unordered_map<std::string, size_t> rank;
  for (size_t i = 0; i < layout.entries().size(); ++i) rank.emplace(layout.entries()[i].name, i);
  auto rank_of = [&](const std::string& n) -> size_t {
    if (n == kTiedLmHeadName) return layout.entries().size();
    auto it = rank.find(n);
    return it == rank.end() ? layout.entries().size() + 1 : it->second;
  };
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return rank_of(a) < rank_of(b); });
  for (const std::string& name : order) {
    std::vector<const Piece*> parts = by_name.at(name);
    std::stable_sort(parts.begin(), parts.end(),
                     [](const Piece* a, const Piece* b) { return part_rank(a->part) < part_rank(b->part); });
    const std::string prec = infer_precision(parts, layout, plan);
    for (const Piece* p : parts) {
      TensorDigest d;
      d.name = p->name, d.part = p->part, d.dtype = p->dtype, d.shape = p->shape, d.precision = prec;
      d.bytes = static_cast<int64_t>(p->bytes.size());
      d.xxh3 = digest_bytes(p->bytes.data(), p->bytes.size());
      dump.manifest.push_back(std::move(d));
    }
  }
  // vLLM computes a tied head with the embed_tokens tensor, prepared under the plan's lm_head precision.
  if (naming == Naming::Vllm && cfg.tie_word_embeddings && by_name.count(layout.entries()[layout.embed()].name) &&
      !by_name.count(kTiedLmHeadName)) {
    const ParamInfo& e = layout.entries()[layout.embed()];
    const std::vector<const Piece*>& parts = by_name.at(e.name);
    const Piece& p = *parts.front();
    if (parts.size() != 1 || (p.dtype != "BF16" && p.dtype != "F32") || p.shape != e.shape)
      fail("{}: {}: {} {}, a tied model's embedding must be BF16 or F32 {}", path, e.name, p.dtype, shape_str(p.shape),
           shape_str(e.shape));
    const std::vector<float> w = values_f32(p);
    const PreparedLinear head = PreparedLinear::prepare(e.name, w.data(), e.shape[0], e.shape[1], plan.lm_head, {});
    for (const HeldPart& h : precision_traits(head.prec.precision).held_parts(head)) {
      const auto* b = static_cast<const std::byte*>(h.data);
      dump.owned.emplace_back(b, b + h.bytes);
      dump.pieces.push_back({kTiedLmHeadName, h.part, dtype_name(h.dtype), h.shape, dump.owned.back()});
    }
    for (TensorDigest& d : linear_digests(head, kTiedLmHeadName)) dump.manifest.push_back(std::move(d));
  }
  return dump;
}

// The linear `name` of a dump as a PreparedLinear (unpacked), for the transpose check.
bool live_linear(const Dump& dump, const std::string& name, PreparedLinear& L) {
  std::string prec;
  for (const TensorDigest& d : dump.manifest)
    if (d.name == name) prec = d.precision;
  if (prec.empty() || prec == "unknown") return false;
  try {
    L.prec = LinearPrecision::parse(prec);
  } catch (const Error&) {
    return false;
  }
  L.name = name;
  for (const Piece& p : dump.pieces) {
    if (p.name != name) continue;
    auto take = [&](auto& v) {
      v.resize(p.bytes.size() / sizeof(v[0]));
      std::memcpy(v.data(), p.bytes.data(), v.size() * sizeof(v[0]));
    };
    if (p.shape.size() == 2 && p.part != "scales") L.n = p.shape[0], L.k = p.shape[1];
    if (p.part == "f32")
      take(L.f32);
    else if (p.part == "bf16")
      take(L.bf16);
    else if (p.part == "codes")
      take(L.codes);
    else if (p.part == "scales" && p.dtype == "F8_E8M0")
      take(L.mx_scales);
    else if (p.part == "scales")
      take(L.fp8_scales);
  }
  const HeldSizes s = precision_traits(L.prec.precision).held_sizes(L.n, L.k);
  return static_cast<int64_t>(L.f32.size()) == s.f32 && static_cast<int64_t>(L.bf16.size()) == s.bf16 &&
         static_cast<int64_t>(L.codes.size()) == s.codes && static_cast<int64_t>(L.mx_scales.size()) == s.mx_scales &&
         static_cast<int64_t>(L.fp8_scales.size()) == s.fp8_scales;
}

}  // namespace

const char* naming_name(Naming n) { return n == Naming::Mxrl ? "mxrl" : "vllm"; }

Naming parse_naming(const std::string& s) {
  if (s == "mxrl") return Naming::Mxrl;
  if (s == "vllm") return Naming::Vllm;
  fail("unknown naming '{}' (mxrl, vllm)", s);
}

void write_dump(const Model& model, Naming naming, const std::string& path) {
  const std::vector<Held> held = held_tensors(model);
  if (naming == Naming::Vllm) return write_vllm(model, held, path);
  SafetensorsWriter w;
  for (const Held& h : held) w.add_view(bundle_key(h.d), dtype_of(h.d.dtype), h.d.shape, h.bytes);
  w.set_metadata({{"format", "pt"}, {"mxrl.naming", "mxrl"}, {"mxrl.plan", model.plan().name}});
  w.write(path);
}

std::vector<TensorDigest> read_dump_manifest(const std::string& path, const ModelConfig& cfg, const PrecisionPlan& plan,
                                             Naming naming) {
  return read_dump(path, cfg, plan, naming).manifest;
}

std::vector<CheckResult> verify_dump_since(const ParamTable& masters, const PrecisionPlan& plan,
                                           const std::string& dump_path, Naming naming,
                                           const std::vector<TensorDigest>& previous, const Exec& exec) {
  const Dump dump = read_dump(dump_path, masters.config(), plan, naming);
  const Model expect(masters, plan, exec);
  const std::vector<TensorDigest> expected = model_digests(expect);
  auto transposed = [&](const std::string& name) {
    const PreparedLinear* e = name == kTiedLmHeadName ? &expect.lm_head() : expect.find_linear(name);
    PreparedLinear L;
    return e && live_linear(dump, name, L) && holds_transpose(L, *e);
  };
  return check_manifests(expected, dump.manifest, previous, transposed);
}

std::vector<CheckResult> verify_dump(const ParamTable& masters, const PrecisionPlan& plan, const std::string& dump_path,
                                     Naming naming, const Exec& exec) {
  return verify_dump_since(masters, plan, dump_path, naming, {}, exec);
}

}  // namespace mxrl
