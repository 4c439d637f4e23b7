#include "faults/faults.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "util/error.h"

namespace mxrl {

namespace {
using S = FaultSeam;
const std::vector<FaultInfo> kFaults = {
    {Fault::DropTensor, "drop-tensor", 1, S::Loader, false, false, false, false,
     "the loader skips one linear (layer 0 q_proj); the sampler keeps its old copy"},
    {Fault::DropExperts, "drop-experts", 1, S::Loader, true, false, false, false,
     "the loader skips every routed expert; the sampler keeps the old experts"},
    {Fault::StaleTiedHead, "stale-tied-head", 1, S::Loader, false, true, false, false,
     "the loader refreshes the embedding but not the tied lm_head"},
    {Fault::SwapGateUp, "swap-gate-up", 2, S::Loader, false, false, false, false,
     "the fused gate/up halves are written in the wrong order (layer 0)"},
    {Fault::ExpertOffset, "expert-offset", 2, S::Loader, true, false, false, false,
     "expert i's weights land in slot i+1 (layer 0; slot 0 keeps its old weights)"},
    {Fault::Transposed, "transposed", 2, S::Loader, false, false, false, false,
     "a square weight (layer 0 o_proj) is written transposed"},
    {Fault::RequantFloor, "requant-floor", 3, S::Loader, false, false, true, false,
     "the sampler re-quantizes MX weights with the floor scale rule instead of its plan's rule"},
    {Fault::ColBlocks, "col-blocks", 3, S::Learner, false, false, false, false,
     "the learner ships its column-blocked (32x1, wgrad) quantization of layer 0 q_proj"},
    {Fault::QuantFromMaster, "quant-from-master", 3, S::Learner, false, false, false, false,
     "the learner quantizes the shipped MX weights from the FP32 master, not the BF16 compute copy"},
    {Fault::StaleScales, "stale-scales", 3, S::Loader, false, false, false, false,
     "the loader writes new codes but keeps the previous version's scales (every MX/FP8 linear)"},
    {Fault::RouterBf16, "router-bf16", 4, S::Loader, true, false, false, false,
     "the loader casts the FP32 router weights to BF16"},
    {Fault::LmHeadFp8, "lm-head-fp8", 4, S::Loader, false, false, false, false,
     "the sampler quantizes the lm_head to MXFP8 although the learner keeps it in high precision"},
    {Fault::StalePacked, "stale-packed", 5, S::Loader, false, false, false, false,
     "the repacked GEMM copy of one linear (layer 0 down_proj) is not rebuilt"},
    {Fault::StalePrefixCache, "stale-prefix-cache", 5, S::Engine, false, false, false, false,
     "prefix-cache entries computed under the old version survive the swap and are reused"},
    {Fault::StalePlan, "stale-plan", 5, S::Engine, false, false, false, false,
     "the prepared decode plan keeps pointing at the old weights (kept alive, so no crash)"},
    {Fault::SyncMidGeneration, "sync-mid-generation", 6, S::Engine, false, false, false, false,
     "the next rollout starts before the sync and the swap does not drain it: samples finish under new weights"},
    {Fault::PartialSync, "partial-sync", 6, S::Channel, false, false, false, false,
     "the transfer breaks half way and the loader, writing in place, leaves the first half of the tensors new"},
    {Fault::ChunkCorrupt, "chunk-corrupt", 6, S::Channel, false, false, false, false,
     "one chunk of the bundle arrives with a flipped byte (its XXH3 no longer matches)"},
    {Fault::ChunkTruncate, "chunk-truncate", 6, S::Channel, false, false, false, false,
     "one chunk of the bundle arrives cut short (half its payload)"},
    {Fault::ChunkStale, "chunk-stale", 6, S::Channel, false, false, false, false,
     "one chunk of the bundle is the previous version's (a reused send buffer)"},
    {Fault::SamplerKilled, "sampler-killed", 6, S::Channel, false, false, false, false,
     "a sampler process dies half way through receiving a bundle", true},
    {Fault::ForeignKernel, "foreign-kernel", 7, S::Engine, false, false, false, false,
     "the sampler's GEMM sums K in 4 partial chains (another engine's order): every digest still matches"},
    {Fault::KvFp8, "kv-fp8", 7, S::Loader, false, false, false, false,
     "the sampler quantizes its KV cache to FP8 although the learner computes attention in high precision"},
    {Fault::KvScaleOne, "kv-scale-one", 7, S::Engine, false, false, false, true,
     "the sampler's FP8 KV cache falls back to a static scale of 1.0 (calibrated scales not loaded)"},
};

std::string known() {
  std::vector<std::string> n;
  for (const FaultInfo& f : kFaults) n.push_back(f.name);
  return fmt::format("{}", fmt::join(n, ", "));
}
}  // namespace

const std::vector<FaultInfo>& fault_table() { return kFaults; }

const FaultInfo& fault_info(Fault f) {
  for (const FaultInfo& i : kFaults)
    if (i.fault == f) return i;
  fail("unknown fault {}", static_cast<int>(f));
}

const char* fault_name(Fault f) { return fault_info(f).name; }

const char* condition_name(int c) {
  static const char* names[] = {"coverage", "placement", "grid", "exceptions", "freshness", "atomicity", "agreement"};
  if (c < 1 || c > 7) fail("condition {} is not 1..7", c);
  return names[c - 1];
}

const char* seam_name(FaultSeam s) {
  switch (s) {
    case S::Learner: return "learner";
    case S::Channel: return "channel";
    case S::Loader: return "loader";
    case S::Engine: return "engine";
  }
  return "?";
}

void FaultPlan::add(Fault f, uint64_t from_version) {
  if (injected(f)) fail("fault {} injected twice", fault_name(f));
  injections_.push_back({f, from_version});
}

FaultPlan FaultPlan::parse(const std::vector<std::string>& specs) {
  FaultPlan p;
  for (const std::string& spec : specs) {
    const size_t at = spec.find('@');
    const std::string name = spec.substr(0, at);
    uint64_t step = 1;
    if (at != std::string::npos) {
      const std::string s = spec.substr(at + 1);
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), step);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size() || step < 1)
        fail("--inject {}: the step after '@' must be an integer >= 1", spec);
    }
    auto it = std::find_if(kFaults.begin(), kFaults.end(), [&](const FaultInfo& f) { return name == f.name; });
    if (it == kFaults.end()) fail("--inject {}: unknown fault '{}' (known: {})", spec, name, known());
    if (p.injected(it->fault)) fail("--inject {}: {} is injected twice", spec, name);
    p.add(it->fault, step);
  }
  return p;
}

bool FaultPlan::active(Fault f, uint64_t version) const {
  for (const Injection& i : injections_)
    if (i.fault == f && version >= i.from_version) return true;
  return false;
}

bool FaultPlan::injected(Fault f) const {
  return std::any_of(injections_.begin(), injections_.end(), [&](const Injection& i) { return i.fault == f; });
}

std::vector<std::string> FaultPlan::specs() const {
  std::vector<std::string> out;
  for (const Injection& i : injections_) out.push_back(fmt::format("{}@{}", fault_name(i.fault), i.from_version));
  return out;
}

}  // namespace mxrl
