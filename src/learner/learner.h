// The learner: FP32 master weights, the forward weights made from them once
// per optimizer step (model/model.h, the same Model the sampler runs), the
// hand-written backward, and AdamW. One step takes a batch of sequences,
// packs them into micro-batches of at most `micro_batch_tokens` tokens,
// accumulates gradients over the micro-batches, and updates the masters.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "learner/backward.h"
#include "learner/optimizer.h"
#include "model/model.h"
#include "util/timeline.h"

namespace mxrl {

// A training sequence: tokens, and which of them are loss targets
// (target[i]: predict tokens[i] from tokens[<i]; target[0] must be 0).
// The loss is sum over targets of -weight[i] * log p(tokens[i] | tokens[<i]).
// Without weights (SFT) every target weighs 1 / (targets in the batch): the
// mean cross-entropy. A policy-gradient loss puts its advantages, ratios and
// clipping into the weights. In one batch, either every sequence has weights
// or none has.
struct Sequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> target;
  std::vector<float> weight;  // empty, or one per token (read at targets only)
  int64_t num_targets() const;
};

// Micro-batches: consecutive runs of sequences, in order, whose token counts
// sum to at most `budget` (a longer sequence forms a micro-batch alone).
std::vector<std::vector<size_t>> pack_micro_batches(const std::vector<Sequence>& seqs, int64_t budget);

// The training recipes: "bf16" and "mxfp8" (and "fp32" for tests), with the
// MX options of docs/reference.md §4.
struct Recipe {
  std::string plan = "mxfp8";             // a precision plan name (model/plan.h) or TOML path
  bool hybrid = false;                    // E5M2 gradients (MX linears)
  bool floor = false;                     // floor scale rule instead of rceil (MX linears)
  bool requant_every_microbatch = false;  // remake the weight quantizations per micro-batch
  PrecisionPlan precision_plan() const;   // the plan with the options applied
  ElemType grad_elem() const { return hybrid ? ElemType::E5M2 : ElemType::E4M3; }
};

struct LearnerConfig {
  Recipe recipe;
  OptimConfig optim;
  int64_t micro_batch_tokens = 4096;
  double aux_loss_coef = 0.0;  // MoE load balancing (0: off)
};
// Its fields (util/settings.h), the optimizer's included under "optim.": the
// keys of the learner settings in the SFT and RL training states.
const SettingsTable<LearnerConfig>& learner_fields();

// Policy log-probs are of softmax(logits / temperature) (temperature 1: the
// logits as they are), each row divided in FP32 exactly as the sampler does
// (sampler/sampling.h), so that learner and sampler log-probs can agree bit
// for bit at any temperature. The gradient flows through the division.
struct LogprobOptions {
  float temperature = 1.0f;
  // Called for every scored row with the sequence index, the target's index
  // among that sequence's targets, and the row's raw FP32 logits [vocab]
  // (before the temperature): for metrics needing the whole distribution.
  std::function<void(size_t seq, size_t target, const float* logits)> on_row;
};

// The gradient of a step is the sum of its micro-batches' gradients in one
// fixed order, whatever computes them: a pairwise tree over micro-batch
// index. The M leaves are padded to W = next power of two; a node is left +
// right, or its only present child as it is (no "+ 0", which would turn a
// -0 into +0). Data-parallel learners split the tree at the level of
// S = min(W, next power of two >= R) subtrees of W/S leaves each; rank r of
// R computes the roots [r*S/R, (r+1)*S/R) and the combiner sums the S roots
// by the same rule. The sum is therefore bitwise the same for any R.
struct GradShard {
  int rank = 0, ranks = 1;
};
// The subtree roots [first, last) shard `s` owns among the S roots of a tree of
// m leaves, and the leaves [leaf_begin, leaf_end) under root j (clipped to m).
struct GradTree {
  int64_t leaves = 0, width = 1, roots = 1;  // M, W, S
  GradTree(int64_t m, int ranks);
  std::pair<int64_t, int64_t> roots_of(int rank, int ranks) const;
  std::pair<int64_t, int64_t> leaves_of(int64_t root) const;
};
// The pairwise sum over a run of aligned nodes fed in index order (a binary
// counter: at most log2(n) + 1 partial sums held at once).
class PairwiseSum {
 public:
  void add(std::vector<float> g);
  bool empty() const { return stack_.empty(); }
  std::vector<float> finish();  // the root (empty if nothing was added)
 private:
  std::vector<std::pair<std::vector<float>, int64_t>> stack_;  // (sum, leaves under it)
  int64_t count_ = 0;
};

struct StepResult {
  double loss = 0;      // mean cross-entropy over the targets, or -sum(weight * log p) with weights
  double aux_loss = 0;  // MoE load-balancing loss (token-weighted over micro-batches)
  int64_t tokens = 0, targets = 0, micro_batches = 0;
  OptimStats optim{};
  PhaseTimes times;              // weight quantization, activation quantization, GEMMs
  double optimizer_seconds = 0;  // the AdamW update
  double seconds = 0;            // the whole step
};

class Learner {
 public:
  Learner(ParamTable masters, LearnerConfig cfg, const Exec& exec = {});

  // One optimizer step on `batch` (loss: mean over all its target tokens).
  StepResult step(const std::vector<Sequence>& batch, float temperature = 1.0f);
  // Forward only, through the training forward pass: per sequence, the
  // log-prob of each target token in order.
  std::vector<std::vector<float>> logprobs(const std::vector<Sequence>& seqs, const LogprobOptions& opt = {});
  // Loss and gradients of `batch` without updating (gradient checks, tests):
  // grads[params().numel()].
  double loss_and_grads(const std::vector<Sequence>& batch, std::vector<float>& grads, StepResult* info = nullptr,
                        float temperature = 1.0f);
  // A shard of that: the gradient tree roots shard.rank owns (GradTree), in
  // root order, for the whole batch (every rank passes all of it). `mb_loss`
  // gets one entry per micro-batch (NaN for those not computed here) and
  // `mb_aux` likewise; sum them in micro-batch order for the step's loss.
  std::vector<std::pair<int64_t, std::vector<float>>> shard_grads(const std::vector<Sequence>& batch, GradShard shard,
                                                                  std::vector<double>& mb_loss,
                                                                  std::vector<double>& mb_aux,
                                                                  StepResult* info = nullptr, float temperature = 1.0f);
  // The optimizer update with a gradient summed elsewhere (data-parallel).
  OptimStats apply_grads(const std::vector<float>& grads);

  // The forward weights of the current masters (made on first use after an update).
  const Model& model();
  std::shared_ptr<const Model> shared_model();
  ParamTable& params() { return params_; }
  const ParamTable& params() const { return params_; }
  AdamW& optimizer() { return opt_; }
  const LearnerConfig& config() const { return cfg_; }
  const PrecisionPlan& plan() const { return plan_; }
  // Call after changing params() from outside (loading a checkpoint).
  void invalidate() { model_.reset(); }
  // Record every phase of the following steps as spans on each thread (null: stop).
  void set_timeline(Timeline* t) { timeline_ = t; }

 private:
  void prepare(PhaseTimes* times);
  ParamTable params_;
  LearnerConfig cfg_;
  PrecisionPlan plan_;
  Timeline* timeline_ = nullptr;
  Exec exec_;
  AdamW opt_;
  std::shared_ptr<const Model> model_;
  BackwardWeights bw_;
  // Reused by every micro-batch: once grown, a step allocates no activations.
  ForwardWorkspace workspace_;
  ForwardTrace trace_;
  BackwardWorkspace backward_workspace_;
};

}  // namespace mxrl
