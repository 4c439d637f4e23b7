// The fault catalogue and the fault plan: weight-sync failures injected where
// the real bug would live (docs/reference.md §6). A fault never edits a check's inputs or
// the manifest the checks compare against: it makes the sampler hold or
// compute what the real bug would make it hold or compute.
//
// faults/ is the one home of the faults. The code that can fail knows no
// fault by name; it takes a small hooks interface (null: no fault), and
// faults/hooks.h implements them all from a FaultPlan:
//   learner  LearnerHooks  (sync/sync.h)       the bundle the learner built
//   channel  ChannelHooks  (sync/transport.h)  the chunk frames as sent
//   loader   LoaderHooks   (sync/sync.h)       requantize, the shipment, in-place
//                                                    writes, the model built
//   engine   EngineHooks         (sampler/engine.h)  the swap (drain, prefix cache,
//                                                    decode plan, forward options)
// rl/ builds the hooks from RlConfig::inject (make_fault_hooks) and hands them
// to the sync and the engine; experiments/fault_matrix runs every fault. Two
// faults also act in rl/, which sits above faults/ and reads the plan itself:
// sampler-killed (the MPI sampler process, dist/distributed.cc) and
// sync-mid-generation's early rollout (train/grpo.cc).
//
// Adding a fault touches about three files: the catalogue (its enum value
// here, its row in faults.cc's table: name, condition, seam, what it needs,
// what goes wrong), its implementation at its seam in hooks.cc (with a
// refusal in check_faults_apply if it cannot apply everywhere), and its
// expected check and finding in train/faults_test.cc. Only a fault at a seam no
// hook reaches yet also adds a virtual to that seam's interface.
//
// A fault is named on the command line as NAME or NAME@STEP: active for every
// sync of version >= STEP (default 1: the first sync after the start), i.e.
// it appears at the sync that ends RL step STEP.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxrl {

enum class Fault {
  // 1 coverage
  DropTensor,
  DropExperts,
  StaleTiedHead,
  // 2 placement
  SwapGateUp,
  ExpertOffset,
  Transposed,
  // 3 grid identity
  RequantFloor,
  ColBlocks,
  QuantFromMaster,
  StaleScales,
  // 4 high-precision exceptions
  RouterBf16,
  LmHeadFp8,
  // 5 freshness
  StalePacked,
  StalePrefixCache,
  StalePlan,
  // 6 atomicity
  SyncMidGeneration,
  PartialSync,
  // 6 atomicity, of the chunked transport (sync/transport.h)
  ChunkCorrupt,
  ChunkTruncate,
  ChunkStale,
  SamplerKilled,
  // 7 agreement
  ForeignKernel,
  KvFp8,
  KvScaleOne,
};

// Where a fault lives, and what it needs to apply at all.
enum class FaultSeam { Learner, Channel, Loader, Engine };

struct FaultInfo {
  Fault fault;
  const char* name;  // "drop-tensor"
  int condition;     // docs/reference.md §6 condition it breaks, 1..7
  FaultSeam seam;
  bool needs_moe;          // routed experts / a router
  bool needs_tied_head;    // tie_word_embeddings
  bool needs_requantize;   // only the requantize sync path has the bug
  bool needs_fp8_kv;       // a sampler plan with an FP8 KV cache
  const char* what;        // one line: what goes wrong
  bool needs_mpi = false;  // a separate sampler process (mpirun ... --samplers S)
};

// Every fault, in condition order.
const std::vector<FaultInfo>& fault_table();
const FaultInfo& fault_info(Fault f);
const char* fault_name(Fault f);
const char* condition_name(int condition);  // "coverage" ... "agreement"
const char* seam_name(FaultSeam s);         // "learner", "channel", "loader", "engine"

struct Injection {
  Fault fault;
  uint64_t from_version = 1;
};

class FaultPlan {
 public:
  FaultPlan() = default;
  // From NAME or NAME@STEP specs; throws mxrl::Error naming the spec and the
  // known faults on an unknown name, a bad step, or a fault named twice.
  static FaultPlan parse(const std::vector<std::string>& specs);
  void add(Fault f, uint64_t from_version);

  bool empty() const { return injections_.empty(); }
  // Whether `f` is injected into the sync of `version`.
  bool active(Fault f, uint64_t version) const;
  // Whether `f` is injected at all (from some version on).
  bool injected(Fault f) const;
  const std::vector<Injection>& injections() const { return injections_; }
  std::vector<std::string> specs() const;  // "name@step", in order of addition

 private:
  std::vector<Injection> injections_;
};

}  // namespace mxrl
