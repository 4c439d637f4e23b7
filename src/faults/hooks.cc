#include "faults/hooks.h"

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "kernels/gemm/gemm.h"
#include "model/digest.h"
#include "model/precision.h"
#include "numerics/bf16.h"
#include "numerics/formats.h"
#include "numerics/mx.h"
#include "util/error.h"

namespace mxrl {

namespace {

bool is_mx(const LinearPrecision& p) { return precision_traits(p.precision).wformat == WFormat::MX; }
bool has_codes(const PreparedLinear& L) { return !L.codes.empty(); }

// The FP32 values a linear computes with, [n, k].
std::vector<float> values_of(const PreparedLinear& L) {
  const WeightView v = L.view();
  std::vector<float> out(static_cast<size_t>(L.n * L.k));
  for (int64_t n = 0; n < L.n; ++n)
    for (int64_t k = 0; k < L.k; ++k) out[n * L.k + k] = weight_value(v, n, k);
  return out;
}

// Swaps what two linears hold, each keeping its name.
void swap_contents(PreparedLinear& a, PreparedLinear& b) {
  std::swap(a, b);
  std::swap(a.name, b.name);
}

PreparedLinear copy_linear(const PreparedLinear& from, const std::string& name) {
  PreparedLinear L = from.payload();
  L.name = name;
  return L;
}

std::string layer0(const std::string& rest) { return "model.layers.0." + rest; }

// Replaces the parts of linear `name` in the bundle by what `L` holds (same positions).
void replace_linear(Bundle& b, const std::string& name, const PreparedLinear& L) {
  const std::vector<TensorDigest> ds = linear_digests(L, name);
  const std::vector<HeldPart> parts = precision_traits(L.prec.precision).held_parts(L);
  size_t j = 0;
  for (size_t i = 0; i < b.manifest.size(); ++i) {
    if (b.manifest[i].name != name) continue;
    if (j >= parts.size()) fail("fault: {} has more parts in the bundle than the linear holds", name);
    const auto* data = static_cast<const std::byte*>(parts[j].data);
    b.payload[i].assign(data, data + parts[j].bytes);
    b.manifest[i] = ds[j];
    ++j;
  }
  if (j != parts.size()) fail("fault: {} not in the bundle with {} parts", name, parts.size());
}

const ParamInfo& param(const ParamTable& t, const std::string& name) {
  const int i = t.index_of(name);
  if (i < 0) fail("fault: no parameter {}", name);
  return t.entries()[i];
}

}  // namespace

std::string fault_target(const Model& m, const std::string& what) {
  std::string any;
  for (const PreparedLinear* L : m.linears()) {
    if (L->name.find(what) == std::string::npos) continue;
    if (L->name.rfind("model.layers.0.", 0) == 0) return L->name;
    if (any.empty()) any = L->name;
  }
  return any;
}

void check_faults_apply(const FaultPlan& faults, const ModelConfig& cfg, const PrecisionPlan& learner_plan,
                        const PrecisionPlan& sampler_plan, SyncMode mode, bool separate_sampler) {
  const ParamTable layout(cfg, /*allocate=*/false);
  bool any_mx = false, any_quantized = false, router_fp32 = false;
  for (const ParamInfo& p : layout.entries()) {
    if (p.role != ParamRole::Linear) continue;
    const LinearPrecision sp = sampler_plan.for_param(p);
    any_mx |= is_mx(sp);
    any_quantized |=
        precision_traits(sp.precision).wformat == WFormat::MX || precision_traits(sp.precision).wformat == WFormat::FP8;
    if (p.linear == LinearKind::Router)
      router_fp32 |= sp.precision == Precision::FP32 && learner_plan.for_param(p).precision == Precision::FP32;
  }
  const int o = layout.index_of(layer0("self_attn.o_proj.weight"));
  const bool square_o = o >= 0 && layout.entries()[o].shape[0] == layout.entries()[o].shape[1];
  for (const Injection& in : faults.injections()) {
    const FaultInfo& f = fault_info(in.fault);
    auto refuse = [&](const std::string& why) { fail("--inject {}: {}", f.name, why); };
    if (f.needs_moe && cfg.num_experts == 0) refuse("needs a MoE model (routed experts and a router)");
    if (f.needs_tied_head && !cfg.tie_word_embeddings)
      refuse("needs a model with a tied lm_head (tie_word_embeddings)");
    if (f.needs_requantize && mode != SyncMode::Requantize)
      refuse("is a bug of the requantize path: use --sync requantize");
    if (f.needs_fp8_kv && !sampler_plan.fp8_kv_cache)
      refuse("needs a sampler plan with an FP8 KV cache (e.g. mxfp8+fp8kv)");
    if (f.needs_mpi && !separate_sampler)
      refuse("needs a separate sampler process: mpirun -np N mxrl rl --learners L --samplers S");
    switch (in.fault) {
      case Fault::RequantFloor:
        if (!any_mx) refuse("needs a sampler plan with MX linears");
        break;
      case Fault::ColBlocks:
      case Fault::QuantFromMaster:
        if (mode != SyncMode::Ship || !any_mx) refuse("needs ship into MX linears (the learner's own MX weights)");
        break;
      case Fault::StaleScales:
        if (!any_quantized) refuse("needs a sampler plan with MX or FP8 linears (codes and scales)");
        break;
      case Fault::RouterBf16:
        if (!router_fp32) refuse("needs an FP32 router on both sides (a plan with router = \"fp32\")");
        break;
      case Fault::LmHeadFp8:
        if (is_mx(sampler_plan.lm_head)) refuse("needs a sampler plan whose lm_head is not MX already");
        if (cfg.hidden_size % 32 != 0) refuse("needs hidden_size divisible by 32");
        break;
      case Fault::KvFp8:
        if (sampler_plan.fp8_kv_cache) refuse("needs a sampler plan without an FP8 KV cache");
        break;
      case Fault::Transposed:
        if (!square_o) refuse("needs a square layer 0 o_proj (hidden_size == heads x head_dim)");
        break;
      default: break;
    }
  }
}

FaultHooks::FaultHooks(FaultPlan plan) : plan_(std::move(plan)) {}

FaultSeams make_fault_hooks(const FaultPlan& plan) {
  if (plan.empty()) return {};
  auto h = std::make_shared<FaultHooks>(plan);
  return {h, {h, h, h}};
}

// ---- engine ----

void FaultHooks::on_swap(uint64_t v, EngineSwap& swap) const {
  if (plan_.active(Fault::SyncMidGeneration, v)) swap.drain = false;         // swap under samples in flight
  if (plan_.active(Fault::StalePrefixCache, v)) swap.drop_prefixes = false;  // the prefix cache is not flushed
  if (plan_.active(Fault::StalePlan, v)) swap.rebind_plan = false;           // the old plan (and weights) stay bound
  if (plan_.active(Fault::ForeignKernel, v)) swap.forward.gemm_split_k = 4;
  if (plan_.active(Fault::KvScaleOne, v)) swap.forward.kv_unit_scale = true;
}

bool FaultHooks::keeps_prefixes() const { return plan_.injected(Fault::StalePrefixCache); }

bool FaultHooks::mixes_versions() const {
  return plan_.injected(Fault::SyncMidGeneration) || plan_.injected(Fault::StalePrefixCache);
}

// ---- channel ----

void FaultHooks::edit(std::vector<ChunkFrame>& frames, std::span<const std::byte> bundle, uint64_t version,
                      size_t chunk_bytes) {
  const size_t k = frames.size() / 2;
  ChunkFrame& f = frames[k];
  if (plan_.active(Fault::ChunkCorrupt, version)) {
    if (f.payload.empty()) fail("fault chunk-corrupt: chunk {} has no payload", k);
    edited_.assign(f.payload.begin(), f.payload.end());
    edited_[edited_.size() / 2] ^= std::byte{0x10};
    f.payload = edited_;
  }
  if (plan_.active(Fault::ChunkTruncate, version)) f.payload = f.payload.first(f.payload.size() / 2);
  if (plan_.active(Fault::ChunkStale, version)) {
    if (!have_previous_) fail("fault chunk-stale: no previous version was sent");
    const size_t pn = chunk_count(previous_.size(), chunk_bytes);
    f = chunk_frame(previous_, previous_version_, chunk_bytes, std::min(k, pn - 1));
  }
  if (plan_.injected(Fault::ChunkStale) && !plan_.active(Fault::ChunkStale, version)) {
    previous_.assign(bundle.begin(), bundle.end());  // what the fault will resend from
    previous_version_ = version;
    have_previous_ = true;
  }
}

// ---- learner ----

void FaultHooks::edit_bundle(Bundle& b, const Model& learner, const ParamTable& masters, const Exec& exec) const {
  const FaultPlan& faults = plan_;
  const uint64_t v = b.version;
  if (faults.active(Fault::ColBlocks, v)) {
    // The learner's wgrad copy of W: 32x1 blocks along N (columns), same code and scale counts.
    const std::string name = layer0("self_attn.q_proj.weight");
    const int i = masters.index_of(name);
    const ParamInfo& p = param(masters, name);
    const PreparedLinear* have = learner.find_linear(name);
    if (!have || !is_mx(have->prec)) fail("fault col-blocks: {} is not an MX linear on the learner", name);
    PreparedLinear L = have->payload();
    mx_quantize(masters.data(i), InType::F32AsBF16, p.shape[0], p.shape[1],
                {L.prec.elem, L.prec.rule, Axis::Col, Rounding::RNE, 0}, L.codes.data(), L.mx_scales.data(), exec);
    replace_linear(b, name, L);
  }
  if (faults.active(Fault::QuantFromMaster, v)) {
    for (const PreparedLinear* have : learner.linears()) {
      if (!is_mx(have->prec) || masters.index_of(have->name) < 0) continue;
      const int i = masters.index_of(have->name);
      const bool shipped = std::any_of(b.manifest.begin(), b.manifest.end(), [&](const TensorDigest& d) {
        return d.name == have->name && d.precision == have->prec.str();
      });
      if (!shipped) continue;
      PreparedLinear L = have->payload();
      mx_quantize(masters.data(i), InType::F32, L.n, L.k, {L.prec.elem, L.prec.rule, Axis::Row, Rounding::RNE, 0},
                  L.codes.data(), L.mx_scales.data(), exec);
      replace_linear(b, have->name, L);
    }
  }
}

// ---- loader ----

bool FaultHooks::active(uint64_t v) const {
  for (const Injection& in : plan_.injections()) {
    const FaultSeam seam = fault_info(in.fault).seam;
    if (v >= in.from_version && (seam == FaultSeam::Loader || seam == FaultSeam::Channel)) return true;
  }
  return false;
}

bool FaultHooks::drains(uint64_t v) const { return !plan_.active(Fault::SyncMidGeneration, v); }

WeightShipment FaultHooks::requantize(const ParamTable& params, const PrecisionPlan& plan, uint64_t v,
                                      const Exec& exec) const {
  if (!plan_.active(Fault::RequantFloor, v)) return Model(params, plan, exec).ship();
  PrecisionPlan floor = plan;
  auto to_floor = [](LinearPrecision& p) {
    if (precision_traits(p.precision).wformat == WFormat::MX) p.rule = ScaleRule::Floor;
  };
  to_floor(floor.decoder), to_floor(floor.router), to_floor(floor.lm_head);
  for (PlanOverride& o : floor.overrides) to_floor(o.precision);
  WeightShipment s = Model(params, floor, exec).ship();
  // The bug: the sampler believes it runs its plan; each linear keeps the plan's label.
  const ParamTable layout(params.config(), /*allocate=*/false);
  for (auto& [name, L] : s.linears) {
    const int i = layout.index_of(name);
    if (i < 0) continue;
    const ParamInfo& p = layout.entries()[i];
    L.prec = p.role == ParamRole::Linear ? plan.for_param(p) : plan.lm_head;
    if (params.config().tie_word_embeddings && i == layout.embed()) L.prec = plan.lm_head;
  }
  return s;
}

void FaultHooks::edit_shipment(WeightShipment& s, PrecisionPlan& plan, const Model& live, uint64_t v,
                               const Exec& exec) const {
  auto on = [&](Fault f) { return plan_.active(f, v); };
  const ModelConfig& cfg = live.config();
  const WeightShipment old = live.ship();
  auto keep_old = [&](const std::string& name) {
    auto it = old.linears.find(name);
    if (it == old.linears.end()) fail("fault: the live model has no linear {}", name);
    s.linears[name] = copy_linear(it->second, name);
  };
  if (on(Fault::DropTensor)) keep_old(layer0("self_attn.q_proj.weight"));
  if (on(Fault::DropExperts))
    for (const auto& [name, L] : old.linears)
      if (name.find(".mlp.experts.") != std::string::npos) keep_old(name);
  if (on(Fault::StaleTiedHead)) keep_old(cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  if (on(Fault::SwapGateUp)) {
    const std::string gate = fault_target(live, "gate_proj");
    std::string up = gate;
    up.replace(up.find("gate_proj"), 9, "up_proj");
    if (gate.empty() || !s.linears.count(up)) fail("fault swap-gate-up: no gate/up pair");
    swap_contents(s.linears[gate], s.linears[up]);
  }
  if (on(Fault::ExpertOffset)) {
    for (const char* part : {"gate_proj", "up_proj", "down_proj"}) {
      auto name = [&](int64_t e) { return fmt::format("model.layers.0.mlp.experts.{}.{}.weight", e, part); };
      for (int64_t e = cfg.num_experts - 1; e >= 1; --e)
        s.linears[name(e)] = copy_linear(s.linears.at(name(e - 1)), name(e));
      keep_old(name(0));
    }
  }
  if (on(Fault::Transposed)) {
    const std::string name = layer0("self_attn.o_proj.weight");
    PreparedLinear& L = s.linears.at(name);
    const std::vector<float> w = values_of(L);
    std::vector<float> t(w.size());
    for (int64_t n = 0; n < L.n; ++n)
      for (int64_t k = 0; k < L.k; ++k) t[k * L.n + n] = w[n * L.k + k];
    L = PreparedLinear::prepare(name, t.data(), L.k, L.n, L.prec, exec).payload();
  }
  if (on(Fault::StaleScales))
    for (auto& [name, L] : s.linears) {
      if (!has_codes(L)) continue;
      const PreparedLinear& o = old.linears.at(name);
      L.mx_scales = o.mx_scales;
      L.fp8_scales = o.fp8_scales;
    }
  if (on(Fault::RouterBf16))
    for (auto& [name, L] : s.linears)
      if (name.find(".mlp.gate.weight") != std::string::npos && !L.f32.empty())
        bf16_round(L.f32.data(), static_cast<int64_t>(L.f32.size()), L.f32.data(), exec);
  if (on(Fault::LmHeadFp8)) {
    const std::string name = cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    PreparedLinear& L = s.linears.at(name);
    plan.lm_head = {Precision::MXFP8, ElemType::E4M3, ScaleRule::RCeil};
    const std::vector<float> w = values_of(L);
    L = PreparedLinear::prepare(name, w.data(), L.n, L.k, plan.lm_head, exec).payload();
  }
  if (on(Fault::KvFp8)) plan.fp8_kv_cache = true;
}

void FaultHooks::write_in_place(Engine& engine, const Bundle& b, const WeightShipment& s, const PrecisionPlan& plan,
                                uint64_t v, const Exec& exec) const {
  if (!plan_.active(Fault::PartialSync, v)) return;
  // The loader writes in place, tensor by tensor in bundle order; the
  // transfer breaks after half of them. The engine keeps reporting the old
  // version, now serving half-new weights.
  const Model& live = engine.model();
  WeightShipment half = live.ship();
  std::vector<std::string> names;
  for (const TensorDigest& d : b.manifest)
    if (names.empty() || names.back() != d.name) names.push_back(d.name);
  const size_t n = names.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const bool head = names[i] == kTiedLmHeadName;
    const std::string name = head ? std::string("model.embed_tokens.weight") : names[i];
    if (s.copies.count(name) && !head) half.copies[name] = s.copies.at(name);
    // A linear, the tied head, or (requantize) the embedding the tied head is made from.
    if (s.linears.count(name) && (head || !s.copies.count(name) || b.mode == SyncMode::Requantize))
      half.linears[name] = s.linears.at(name).payload();
  }
  auto m = std::make_shared<const Model>(Model::from_shipment(live.config(), plan, half, exec));
  engine.stage(std::move(m), engine.version());
  engine.swap_now();
  fail("sync: version {}: the transfer broke after {} of {} tensors", v, n, names.size());
}

void FaultHooks::edit_model(Model& next, const Model& live, uint64_t v, const Exec& exec) const {
  if (!plan_.active(Fault::StalePacked, v)) return;
  const std::string name = fault_target(live, "down_proj");
  PreparedLinear* L = next.find_linear(name);
  const PreparedLinear* old = live.find_linear(name);
  if (!L || !old) fail("fault stale-packed: no linear {}", name);
  L->packed = PackedWeight::pack(old->view(), exec);  // the old version's packing, kept
}

}  // namespace mxrl
