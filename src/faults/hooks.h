// The faults at their seams: one FaultHooks object per run implements every
// seam's hooks interface from a FaultPlan (faults/faults.h lists the seams).
// Each fault makes the sampler hold or compute what the real bug would make
// it hold or compute; none touches the expected manifest or any other input
// of a check.
//
// Targets are fixed so that findings can be predicted: layer 0's q_proj
// (drop-tensor, col-blocks), o_proj (transposed), the first gate/up pair
// (swap-gate-up: the dense MLP's, else expert 0's), layer 0's experts
// (expert-offset), the first down_proj (stale-packed).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "faults/faults.h"
#include "model/model.h"
#include "sampler/engine.h"
#include "sync/sync.h"

namespace mxrl {

// Every seam's hooks for one plan. One object per run: the channel's hook
// keeps the last bundle sent while chunk-stale waits for its version.
class FaultHooks final : public EngineHooks, public LearnerHooks, public ChannelHooks, public LoaderHooks {
 public:
  explicit FaultHooks(FaultPlan plan);
  const FaultPlan& plan() const { return plan_; }

  // Engine: stale-plan (the decode plan is not rebound), stale-prefix-cache
  // (prefix entries are kept for reuse and survive swaps), sync-mid-generation
  // (a swap does not wait for samples in flight), foreign-kernel (the GEMM
  // sums K in 4 partial chains), kv-scale-one (an FP8 KV cache written with
  // scale 1.0); each from the swap to its version on.
  void on_swap(uint64_t version, EngineSwap& swap) const override;
  bool keeps_prefixes() const override;
  bool mixes_versions() const override;

  // Learner: col-blocks ships layer 0 q_proj's column-blocked quantization
  // (same byte counts, so the loader takes it); quant-from-master re-quantizes
  // every shipped MX linear from the FP32 master. The manifest entries are
  // those of what is shipped (the learner digests what it sends).
  void edit_bundle(Bundle& b, const Model& learner, const ParamTable& masters, const Exec& exec) const override;

  // Channel, on the chunk count/2: chunk-corrupt flips a byte of its payload,
  // chunk-truncate cuts its payload in half, chunk-stale sends the previous
  // version's chunk in its place.
  void edit(std::vector<ChunkFrame>& frames, std::span<const std::byte> bundle, uint64_t version,
            size_t chunk_bytes) override;

  // Loader: active for every loader and channel fault of the version (the
  // loader then writes step by step); requant-floor (requantize with the
  // floor scale rule), the shipment faults (drop-tensor ... kv-fp8),
  // partial-sync (half the tensors written in place, then the transfer
  // breaks), stale-packed (the model keeps the old packed down_proj).
  bool active(uint64_t version) const override;
  bool drains(uint64_t version) const override;
  WeightShipment requantize(const ParamTable& params, const PrecisionPlan& plan, uint64_t version,
                            const Exec& exec) const override;
  void edit_shipment(WeightShipment& s, PrecisionPlan& plan, const Model& live, uint64_t version,
                     const Exec& exec) const override;
  void write_in_place(Engine& engine, const Bundle& b, const WeightShipment& s, const PrecisionPlan& plan,
                      uint64_t version, const Exec& exec) const override;
  void edit_model(Model& next, const Model& live, uint64_t version, const Exec& exec) const override;

 private:
  FaultPlan plan_;
  std::vector<std::byte> edited_, previous_;  // channel: an edited payload; the last bundle sent (chunk-stale)
  uint64_t previous_version_ = 0;
  bool have_previous_ = false;
};

// The hooks for `plan`, to hand to the engine and the sync: null for an
// empty plan (the seams then run as they should).
struct FaultSeams {
  std::shared_ptr<const EngineHooks> engine;
  SyncHooks sync;
};
FaultSeams make_fault_hooks(const FaultPlan& plan);

// Refuses, with one line, a fault that cannot apply to this model and sync
// (an expert fault on a dense model, stale-tied-head on an untied one,
// router-bf16 without an FP32 router, requant-floor without requantize into
// an MX plan, transposed without a square o_proj, ...).
// `separate_sampler`: the sampler is another process (the MPI runtime).
void check_faults_apply(const FaultPlan& faults, const ModelConfig& cfg, const PrecisionPlan& learner_plan,
                        const PrecisionPlan& sampler_plan, SyncMode mode, bool separate_sampler = false);

// The name the faults target: the first linear of `m` whose name contains
// `what`, preferring layer 0; "" if none.
std::string fault_target(const Model& m, const std::string& what);

}  // namespace mxrl
