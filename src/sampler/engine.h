// The rollout engine: batched generation with a KV cache and continuous
// batching, on the shared model definition and kernels (model/model.h).
//
// Requests (a prompt, n samples, sampling parameters, stop tokens, seed) are
// queued; each step admits waiting samples while the KV budget allows
// (prefill), decodes one token for every running sample, and returns those
// that finished. Finished samples leave, waiting ones join between steps.
//
// Guarantees:
//   - a sample's tokens depend only on (seed, request id, sample index): the
//     draws are counter-based and the forward pass is batch-invariant;
//   - its log-probs are those of `mxrl score` for the same tokens under the
//     same plan, bit for bit (at temperature 1; otherwise of logits / T);
//   - it is generated entirely under one weight version, recorded with it: a
//     staged update waits for the samples in flight, then swaps the model,
//     drops every cache entry and bumps the cache epoch; an update that fails
//     to build leaves the old version serving, whole.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "model/forward.h"
#include "sampler/sampling.h"

namespace mxrl {

struct GenerationRequest {
  int64_t id = -1;                  // names the random streams; -1: the submission index
  std::vector<int32_t> prompt;
  int64_t n = 1;                    // samples
  int64_t max_new_tokens = 64;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // a sampled stop token ends the sample (and is kept)
  uint64_t seed = 0;
};

enum class FinishReason { Stop, Length };
const char* finish_reason_name(FinishReason r);

struct GeneratedSample {
  int64_t request = 0;  // id returned by submit
  int64_t index = 0;    // sample index within the request
  std::vector<int32_t> tokens;  // generated tokens only
  std::vector<float> logprobs;  // per generated token, under the policy at the sampling temperature
  FinishReason finish = FinishReason::Length;
  uint64_t version = 0;         // weight version it was generated under
};

struct EngineOptions {
  int64_t kv_budget_tokens = 1 << 20;  // cache positions reserved at once (prompt + max_new per sample)
  int64_t max_prefill_tokens = 4096;   // prompt tokens admitted per step
};

class Engine {
 public:
  Engine(std::shared_ptr<const Model> model, uint64_t version, EngineOptions opt = {}, const Exec& exec = {});

  // Validates and queues a request; returns its id (req.id, or the
  // submission index 0, 1, 2, ... when req.id is -1).
  int64_t submit(const GenerationRequest& req);
  // One scheduling step; returns the samples that finished in it.
  std::vector<GeneratedSample> step();
  // Steps until nothing is waiting or running; samples in completion order.
  std::vector<GeneratedSample> run();
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }

  // Stages weights for `version`: swapped in at the first step boundary with
  // no sample in flight (new samples are not admitted meanwhile).
  void stage(std::shared_ptr<const Model> next, uint64_t version);
  // Builds the sampler's own model from high-precision weights under `plan`
  // and stages it; if building throws, nothing changes (and it rethrows).
  void stage(const ParamTable& params, const PrecisionPlan& plan, uint64_t version);
  // Stages the learner's forward weights exactly as shipped (MX codes and
  // scales byte for byte, no re-quantization) under the current plan; a
  // shipment that does not fit (missing, extra, wrong precision or size)
  // throws and changes nothing.
  void stage(const WeightShipment& shipment, uint64_t version);

  uint64_t version() const { return version_; }
  uint64_t cache_epoch() const { return epoch_; }
  const Model& model() const { return *model_; }
  bool update_pending() const { return staged_ != nullptr; }

 private:
  struct Seq {
    int64_t request, index;  // submission index, sample index
    int slot = -1;
    int64_t reserved = 0;
    bool prefilled = false;
    GeneratedSample out;
  };
  void maybe_swap();
  void admit(std::vector<Seq*>& prefill);

  std::shared_ptr<const Model> model_, staged_;
  uint64_t version_ = 0, staged_version_ = 0, epoch_ = 0;
  EngineOptions opt_;
  Exec exec_;
  KvCache cache_;
  std::vector<GenerationRequest> requests_;  // by submission index
  std::deque<Seq> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  int64_t reserved_ = 0;
  std::vector<float> logits_, scratch_;
  ForwardWorkspace workspace_;  // reused by every step: decode allocates nothing once grown
};

}  // namespace mxrl
