// Sync faults at the learner's and the loader's seams (util/faults.h lists
// them all; the engine's own are in sampler/engine.cc). Each makes the
// sampler hold what the real bug would make it hold; none touches the
// expected manifest or any other input of a check.
//
// Targets are fixed so that findings can be predicted: layer 0's q_proj
// (drop-tensor, col-blocks), o_proj (transposed), the first gate/up pair
// (swap-gate-up: the dense MLP's, else expert 0's), layer 0's experts
// (expert-offset), the first down_proj (stale-packed).
#pragma once
#include <cstdint>
#include <string>

#include "model/model.h"
#include "sync/bundle.h"
#include "util/faults.h"

namespace mxrl::sync {

// Refuses, with one line, a fault that cannot apply to this model and sync
// (an expert fault on a dense model, stale-tied-head on an untied one,
// router-bf16 without an FP32 router, requant-floor without requantize into
// an MX plan, transposed without a square o_proj, ...).
// `separate_sampler`: the sampler is another process (the MPI runtime).
void check_faults_apply(const FaultPlan& faults, const ModelConfig& cfg, const PrecisionPlan& learner_plan,
                        const PrecisionPlan& sampler_plan, SyncMode mode, bool separate_sampler = false);

// The learner's seam, after it built version `b.version`: col-blocks ships
// layer 0 q_proj's column-blocked quantization (same byte counts, so the
// loader takes it); quant-from-master re-quantizes every shipped MX linear from
// the FP32 master. The manifest entries are those of what is shipped (the
// learner digests what it sends).
void inject_learner_faults(Bundle& b, const Model& learner, const ParamTable& masters, const FaultPlan& faults,
                           const Exec& exec = {});

// The loader's seam: edits the shipment it is about to write (and the plan it
// builds the model under) against the live model it replaces.
void inject_loader_faults(WeightShipment& s, PrecisionPlan& plan, const Model& live, uint64_t version,
                          const FaultPlan& faults, const Exec& exec = {});

// requantize: the sampler quantizes the high-precision weights under `plan`;
// with requant-floor, MX linears with the floor scale rule (still labelled
// with the plan's rule).
WeightShipment requantize_shipment(const ParamTable& params, const PrecisionPlan& plan, bool floor_fault,
                                   const Exec& exec = {});

// After the model is built: stale-packed puts the live model's packed copy of
// the first down_proj into the new model.
void inject_model_faults(Model& next, const Model& live, uint64_t version, const FaultPlan& faults,
                         const Exec& exec = {});

// The name the faults target: the first linear of `m` whose name contains
// `what`, preferring layer 0; "" if none.
std::string fault_target(const Model& m, const std::string& what);

}  // namespace mxrl::sync
