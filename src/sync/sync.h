// One weight sync, learner -> sampler, in one process (docs/reference.md §6):
//
//   learner   make_*_bundle(version v)  -> serialize  -> the channel (bytes)
//   sampler   parse_bundle (digests verified) -> decode -> Engine::stage
//             (a complete new model, validated) -> swap when no sample is in
//             flight (caches dropped, execution plan rebound) -> reports v
//   checks    the seven, against the live engine, each timed
//
// A bundle that fails anywhere on the sampler's side leaves the old version
// serving, whole; the report says so and the atomicity check verifies it.
// The channel is the seam where transport faults go (and, for the
// distributed runtime, the MPI transport). Faults reach the learner's bundle,
// the channel and the loader through the hooks below (faults/hooks.h
// implements them; sync/ knows no fault by name).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sampler/engine.h"
#include "sync/bundle.h"
#include "sync/checks.h"
#include "sync/transport.h"

namespace mxrl {

// The learner's seam: edits the bundle it built (version b.version) before
// it is serialized. The manifest entries must be those of what is shipped.
class LearnerHooks {
 public:
  virtual ~LearnerHooks() = default;
  virtual void edit_bundle(Bundle& b, const Model& learner, const ParamTable& masters, const Exec& exec) const = 0;
};

// The loader's seam (apply_bundle). Each default is the loader as it should be.
class LoaderHooks {
 public:
  virtual ~LoaderHooks() = default;
  // Whether the loader of `version` is faulty: it then builds the version
  // through the steps below instead of staging the bundle as it is.
  virtual bool active(uint64_t version) const = 0;
  // Whether the loader refuses an engine with samples in flight.
  virtual bool drains(uint64_t /*version*/) const { return true; }
  // requantize: the sampler's quantization of the high-precision weights under `plan`.
  virtual WeightShipment requantize(const ParamTable& params, const PrecisionPlan& plan, uint64_t version,
                                    const Exec& exec) const;
  // Edits the shipment about to be written (and the plan it builds under)
  // against the live model it replaces.
  virtual void edit_shipment(WeightShipment& /*s*/, PrecisionPlan& /*plan*/, const Model& /*live*/,
                             uint64_t /*version*/, const Exec& /*exec*/) const {}
  // May write part of the shipment into the engine in place and throw (a
  // transfer that breaks half way).
  virtual void write_in_place(Engine& /*engine*/, const Bundle& /*b*/, const WeightShipment& /*s*/,
                              const PrecisionPlan& /*plan*/, uint64_t /*version*/, const Exec& /*exec*/) const {}
  // Edits the model built from the shipment before it is staged.
  virtual void edit_model(Model& /*next*/, const Model& /*live*/, uint64_t /*version*/, const Exec& /*exec*/) const {}
};

// The hooks of one sync (null: no fault at that seam).
struct SyncHooks {
  std::shared_ptr<const LearnerHooks> learner;
  std::shared_ptr<ChannelHooks> channel;  // may keep state from sync to sync
  std::shared_ptr<const LoaderHooks> loader;
};

struct SyncSettings {
  SyncMode mode = SyncMode::Ship;
  CheckMode checks = CheckMode::Stop;
  int64_t agreement_every = 1;  // run the agreement check on every Nth version (0: never)
  AgreementBound bound;         // bound.bitwise: the sampler runs the learner's plan
  // The plan the sampler is meant to run: the expectation the checks compare
  // against (unset: the engine's plan at the time of the sync).
  std::optional<PrecisionPlan> sampler_plan;
  SyncHooks hooks;  // injected faults at the learner's, the channel's and the loader's seams
  // The chunked channel's sender (keeps the last version's chunks); null:
  // one per sync, 1 MiB chunks.
  std::shared_ptr<ChunkSender> sender;
};

// Moves bundle bytes from the learner to the sampler. The in-process channel
// hands them over as they are.
using Channel = std::function<std::vector<std::byte>(std::vector<std::byte>)>;

struct SyncReport {
  uint64_t version = 0;
  bool applied = false;  // the sampler serves `version`
  std::string error;     // why the sampler refused the bundle, if it did
  int64_t bytes = 0;
  double build_seconds = 0, apply_seconds = 0, check_seconds = 0;
  std::vector<CheckResult> checks;            // those that ran, in condition order
  bool passed() const;                        // applied and every check that ran passed
  std::vector<std::string> findings() const;  // "check: finding" lines
  nlohmann::json to_json() const;             // per check: passed, seconds, findings (and measured)
};

// Whether a sampler plan computes exactly as the learner's plan does (same
// precision for every tensor, same KV cache): agreement must then be bitwise.
bool same_numerics(const Model& learner, const PrecisionPlan& sampler_plan, const Exec& exec = {});

// The sampler's loader: decodes the bundle for the engine's plan and stages
// it, then swaps it in (the engine must be idle). Throws, leaving the engine
// as it was, when the bundle does not fit. Loader faults are injected here
// through `hooks` (null: none).
void apply_bundle(Engine& engine, const Bundle& bundle, const LoaderHooks* hooks = nullptr, const Exec& exec = {});

// The sync in its two halves, as the MPI runtime runs them in two processes.
//
// The learner's half: the bundle bytes of `version` for a sampler under
// `plan` (ship or requantize; learner faults injected).
std::vector<std::byte> build_bundle_bytes(const Model& learner, const ParamTable& masters, const PrecisionPlan& plan,
                                          uint64_t version, const SyncSettings& s, const Exec& exec = {});
// What the learner knows about `version` for the checks: the expected
// manifest and, when the agreement check is due, its logits of the probe.
struct CheckReference {
  std::vector<TensorDigest> manifest;
  bool agreement = false;
  std::vector<std::vector<float>> probe_logits;  // per probe sequence [len, vocab]
  // In process only: does the live linear `name` hold the learner's weight transposed?
  std::function<bool(const std::string& name)> transposed;
};
bool agreement_due(const SyncSettings& s, uint64_t version);
CheckReference learner_reference(const Model& learner, const ParamTable& masters, const PrecisionPlan& plan,
                                 uint64_t version, const SyncSettings& s, const Probe& probe, const Exec& exec = {});
// The sampler's half: `receive` yields the reassembled bundle bytes (or
// throws: a refused transfer), which are parsed and applied; then, unless
// checks are off, `reference` is asked for the learner's side and the seven
// checks run against the live engine.
SyncReport apply_and_check(Engine& engine, uint64_t version, const std::function<std::vector<std::byte>()>& receive,
                           const std::function<CheckReference()>& reference, const SyncSettings& s, const Probe& probe,
                           const std::vector<GeneratedSample>& rollout, uint64_t rollout_version,
                           const Exec& exec = {});

// One sync of version `version` from the learner (its forward model and FP32
// masters) to `engine`, then the checks. `rollout` holds the samples of the
// last generation (meant for `rollout_version`) for the atomicity check;
// `probe` feeds the agreement check.
SyncReport sync_weights(const Model& learner, const ParamTable& masters, Engine& engine, uint64_t version,
                        const SyncSettings& settings, const Probe& probe, const std::vector<GeneratedSample>& rollout,
                        uint64_t rollout_version, const Channel& channel = {}, const Exec& exec = {});

}  // namespace mxrl
