// The rollout engine: batched generation with a KV cache, continuous batching
// and prompt-prefix sharing, on the shared model definition and kernels
// (model/model.h).
//
// Requests (a prompt, n samples, sampling parameters, stop tokens, seed) are
// queued; each step admits waiting samples in order while the KV budget and
// the prefill cap allow, runs one forward() call (the prompts being prefilled
// and the last token of every other running sample), samples one token for
// every running sample, and returns those that finished. Finished samples
// leave, waiting ones join between steps.
//
// Prefix sharing (EngineOptions::prefix_sharing): a prompt's KV entries are
// computed once for all samples with exactly the same prompt tokens (of one
// request or of several). The first such sample admitted prefills the prompt
// into a prefix-cache slot (keeping the logits of its last row); every sample
// then starts from a copy of that slot and draws its first token from those
// stored logits, with no forward of its own. An entry lives, counted in the KV
// budget, while a waiting sample can still use it. When the budget cannot hold
// a prompt's entry beside its sample, or no other waiting sample has that
// prompt (an entry would serve one copy, then go), the sample prefills its
// own slot. Since
// the forward pass is batch-invariant and the copy is exact, sharing is
// bitwise invisible in the samples.
//
// Guarantees:
//   - a sample's tokens depend only on (seed, request id, sample index): the
//     draws are counter-based and the forward pass is batch-invariant (the
//     samples are the same with sharing on or off, for any budget, batch
//     composition or thread count);
//   - its log-probs are those of `mxrl score` for the same tokens under the
//     same plan, bit for bit (at temperature 1; otherwise of logits / T);
//   - it is generated entirely under one weight version, recorded with it and
//     with every token (token_versions; a prompt's prefix entry counts): a
//     staged update waits for the samples in flight, then swaps the model,
//     drops every KV and prefix-cache entry, bumps the cache epoch and rebinds
//     the decode plan; an update that fails to build leaves the old version
//     serving, whole.
//
// Freshness introspection: everything the engine derived from the weights
// (the decode plan, prefix entries, running samples' KV slots) is listed by
// derived_objects() with the version and epoch that built it; the packed
// GEMM copies inside the model have PackedWeight::fingerprint().
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/forward.h"
#include "model/score.h"
#include "sampler/sampling.h"

namespace mxrl {

struct GenerationRequest {
  int64_t id = -1;  // names the random streams; -1: the submission index
  std::vector<int32_t> prompt;
  int64_t n = 1;  // samples
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // a sampled stop token ends the sample (and is kept)
  uint64_t seed = 0;
};

enum class FinishReason { Stop, Length };
const char* finish_reason_name(FinishReason r);

struct GeneratedSample {
  int64_t request = 0;          // id returned by submit
  int64_t index = 0;            // sample index within the request
  std::vector<int32_t> tokens;  // generated tokens only
  std::vector<float> logprobs;  // per generated token, under the policy at the sampling temperature
  FinishReason finish = FinishReason::Length;
  uint64_t version = 0;  // weight version it was generated under
  // Per generated token, the version whose logits it was drawn from (the
  // first token's: the prompt's prefill, shared or not). All equal `version`.
  std::vector<uint64_t> token_versions;
  // With EngineOptions::record_logits: the raw FP32 logits each token was
  // drawn from, [tokens.size(), vocab] row-major (before temperature or
  // filtering); empty otherwise.
  std::vector<float> logits;
};

struct EngineOptions {
  int64_t kv_budget_tokens =
      1 << 20;  // cache positions reserved at once (prompt + max_new per sample, + live prefix entries)
  int64_t max_prefill_tokens = 4096;  // prompt tokens prefilled per step
  bool prefix_sharing = true;         // compute each distinct prompt's KV once for all its samples
  bool record_logits = false;         // keep GeneratedSample::logits
  // Another engine's numerics instead of the contract's (model/linear.h):
  // a foreign GEMM reduction order, a unit FP8 KV scale. {}: the contract.
  ForwardOptions forward{};
};

// What the swap to a version does; EngineHooks::on_swap may change it.
struct EngineSwap {
  bool drain = true;          // wait for the samples in flight
  bool drop_prefixes = true;  // flush the prefix cache
  bool rebind_plan = true;    // bind the decode plan to the new model
  ForwardOptions forward{};   // the numerics from this version on (in: the current ones)
};

// The engine's seam for injected faults (faults/ implements it; the engine
// knows no fault by name). Each default is the engine as it should be.
class EngineHooks {
 public:
  virtual ~EngineHooks() = default;
  // At the swap to `version` (called before the swap decides to wait).
  virtual void on_swap(uint64_t /*version*/, EngineSwap& /*swap*/) const {}
  // Prefix entries are kept for reuse, across versions (never released).
  virtual bool keeps_prefixes() const { return false; }
  // A sample may span versions (the engine's internal version checks allow it).
  virtual bool mixes_versions() const { return false; }
};

// The prepared execution plan step() computes through (the analogue of a
// captured CUDA graph): bound to the live model at construction and at
// every swap, never otherwise.
struct DecodePlan {
  std::shared_ptr<const Model> model;
  uint64_t version = 0;
  uint64_t epoch = 0;  // cache epoch it was bound in
};

// Something live in the engine that was derived from the weights.
struct DerivedObject {
  std::string kind;      // "plan" (the decode plan), "prefix" (a prefix-cache entry), "kv" (a running sample's KV slot)
  std::string name;      // which one, for messages
  uint64_t version = 0;  // the weight version that built it
  uint64_t epoch = 0;    // the cache epoch it was built in
};

class Engine {
 public:
  // `hooks`: injected faults (faults/hooks.h builds them; null: none).
  Engine(std::shared_ptr<const Model> model, uint64_t version, EngineOptions opt = {}, const Exec& exec = {},
         std::shared_ptr<const EngineHooks> hooks = nullptr);

  // Validates and queues a request; returns its id (req.id, or the
  // submission index 0, 1, 2, ... when req.id is -1).
  int64_t submit(const GenerationRequest& req);
  // One scheduling step; returns the samples that finished in it.
  std::vector<GeneratedSample> step();
  // Steps until nothing is waiting or running (swapping in a staged update
  // when it can); samples in completion order.
  std::vector<GeneratedSample> run();
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }

  // Stages weights for `version`: swapped in at the first step boundary with
  // no sample in flight (new samples are not admitted meanwhile). A second
  // stage before the swap replaces the first.
  void stage(std::shared_ptr<const Model> next, uint64_t version);
  // Builds the sampler's own model from high-precision weights under `plan`
  // and stages it; if building throws, nothing changes (and it rethrows).
  void stage(const ParamTable& params, const PrecisionPlan& plan, uint64_t version);
  // Stages the learner's forward weights exactly as shipped (MX codes and
  // scales byte for byte, no re-quantization) under the current plan; a
  // shipment that does not fit (missing, extra, wrong precision or size)
  // throws and changes nothing.
  void stage(const WeightShipment& shipment, uint64_t version);
  // Swaps in the staged update now if no sample is in flight: the model and
  // version change, every KV and prefix entry is dropped, the epoch bumps and
  // the plan is rebound. Returns whether it swapped.
  bool swap_now();

  uint64_t version() const { return version_; }  // the live version (changes only at a swap)
  uint64_t cache_epoch() const { return epoch_; }
  const Model& model() const { return *model_; }
  std::shared_ptr<const Model> shared_model() const { return model_; }
  bool update_pending() const { return staged_ != nullptr; }
  uint64_t staged_version() const { return staged_version_; }  // meaningful while update_pending()

  const DecodePlan& decode_plan() const { return plan_; }
  bool plan_is_live() const { return plan_.model == model_ && plan_.version == version_ && plan_.epoch == epoch_; }
  // The plan, then every prefix entry, then every running sample's KV slot.
  std::vector<DerivedObject> derived_objects() const;

  // Scoring and full logits through the model, Exec and forward options
  // step() computes with (the bound plan's): score_sequences and
  // sequence_logits of model/score.h.
  std::vector<std::vector<float>> score(const std::vector<ScoreRequest>& reqs) const;
  std::vector<float> sequence_logits(const std::vector<int32_t>& tokens) const;

 private:
  // A prompt's KV in its own slot and the logits of its last row.
  struct PrefixEntry {
    const std::vector<int32_t>* prompt = nullptr;  // its key in prefix_
    int slot = -1;
    int64_t len = 0;
    uint64_t version = 0, epoch = 0;
    std::vector<float> logits;  // [vocab]
  };
  // Prefill: the prompt into its own slot this step; Attach: copy a prefix
  // entry this step; Decode: feed the last token.
  enum class Stage { Prefill, Attach, Decode };
  struct Seq {
    int64_t request, index;  // submission index, sample index
    int slot = -1;
    int64_t reserved = 0;
    Stage stage = Stage::Prefill;
    PrefixEntry* prefix = nullptr;  // Attach: the entry (valid during the step)
    uint64_t kv_version = 0, kv_epoch = 0;
    GeneratedSample out;
  };
  struct Row {  // the logits a running sample draws from this step
    const float* logits;
    uint64_t version;
  };
  void admit(std::vector<PrefixEntry*>& fresh);
  PrefixEntry* find_prefix(const std::vector<int32_t>& prompt);
  PrefixEntry& new_prefix(const std::vector<int32_t>& prompt);
  void release_unused_prefixes();
  void drop_prefixes();
  std::vector<Row> compute_rows(const std::vector<PrefixEntry*>& fresh);
  Row attach(Seq& s);
  Sampled draw(const Seq& s, const Row& row, std::vector<float>& scratch) const;
  bool record(Seq& s, const Row& row, const Sampled& tok);  // true when the sample finished
  std::vector<GeneratedSample> retire(const std::vector<bool>& finished);

  std::shared_ptr<const Model> model_, staged_;
  uint64_t version_ = 0, staged_version_ = 0, epoch_ = 0;
  DecodePlan plan_;
  EngineOptions opt_;
  Exec exec_;
  std::shared_ptr<const EngineHooks> hooks_;
  KvCache cache_;
  std::vector<GenerationRequest> requests_;  // by submission index
  std::deque<Seq> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  std::map<std::vector<int32_t>, int64_t> waiting_prompts_;  // waiting samples per prompt
  std::map<std::vector<int32_t>, PrefixEntry> prefix_;       // live prefix entries
  int64_t reserved_ = 0;                                     // budget held by running samples and prefix entries
  std::vector<float> logits_;
  std::vector<std::vector<float>> scratch_;  // sample_token's, one per chunk of step()'s draws
  ForwardWorkspace workspace_;  // reused by every step: decode allocates nothing once grown
};

}  // namespace mxrl
