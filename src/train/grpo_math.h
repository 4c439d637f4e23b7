// The GRPO objective (docs/reference.md §7) as pure functions: no model, no learner,
// double-precision arithmetic throughout. The mismatch metrics are in sync/mismatch.h.
//
// Reference: verl (verl/trainer/ppo/core_algos.py: compute_grpo_outcome_advantage,
// compute_policy_loss_vanilla, agg_loss; rollout_corr_helper.py: token-level
// rollout IS / rejection). Where mxrl follows verl and where it differs:
//   advantages   (r - mean) / (std + eps), std unbiased (torch.std)    follows
//                Dr. GRPO (AdvNorm::None): r - mean                    follows
//                group of 1: verl gives r / (1 + eps); mxrl gives 0     differs
//                all-equal group: verl gives (r - mean)/eps, which is
//                0 only when mean rounds back to r; mxrl gives exactly 0 differs
//   PPO clip     max(-A r, -A clip(r, 1-lo, 1+hi))                     follows
//                verl clamps log r to [-20, 20]; mxrl does not          differs
//                verl adds dual-clip (clip_ratio_c = 3) for A < 0;
//                mxrl has no dual-clip                                  differs
//   TIS          l *= min(exp(logp_old - logp_rollout), C), no grad     follows
//   MIS          token-level mask mode: tokens with w outside [1/C, C]
//                are rejected; kept tokens are weighted by w            follows
//                rejected tokens leave every denominator (verl writes
//                the rejection into response_mask before agg_loss)      follows
//   aggregation  token-mean, seq-mean-token-sum, seq-mean-token-mean;
//                sequences with no kept token leave the sequence mean
//                (verl's seq_mask); an empty batch gives loss 0         follows
//                single process only (no dp_size / global batch size)   differs
#pragma once
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mxrl {

enum class AdvNorm { Std, None };  // "std" | "none"
enum class LossAgg {
  TokenMean,
  SeqMeanTokenSum,
  SeqMeanTokenMean
};                                                // "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean"
enum class RolloutCorrection { None, TIS, MIS };  // "none" | "tis" | "mis"

const char* name(AdvNorm norm);
const char* name(LossAgg agg);
const char* name(RolloutCorrection correction);
// Each throws mxrl::Error naming the bad value and listing the accepted names.
AdvNorm parse_adv_norm(std::string_view s);
LossAgg parse_loss_agg(std::string_view s);
RolloutCorrection parse_rollout_correction(std::string_view s);

struct AdvantageStats {
  int64_t groups = 0, zero_groups = 0;     // zero_groups: all rewards equal (advantage exactly 0)
  double reward_mean = 0, reward_std = 0;  // over all samples; std unbiased (0 for one sample)
};

// rewards: groups of `group_size` consecutive samples. A_i = (r_i - mean) / (std + eps)
// with std the unbiased (n-1) standard deviation of the group (AdvNorm::Std), or
// r_i - mean (AdvNorm::None). A group whose rewards are all equal (including any
// group of one) gets advantage exactly 0 and counts in zero_groups. Throws if
// group_size < 1, rewards.size() is not a multiple of it, eps < 0 or not finite,
// or a reward is not finite. Empty rewards give an empty result.
std::vector<double> group_advantages(const std::vector<double>& rewards, int64_t group_size, AdvNorm norm, double eps,
                                     AdvantageStats* stats = nullptr);

struct PolicyLossConfig {
  double clip_low = 0.2, clip_high = 0.28;  // ratio clipped to [1 - clip_low, 1 + clip_high]
  LossAgg agg = LossAgg::TokenMean;
  RolloutCorrection correction = RolloutCorrection::None;
  double cap = 2.0;  // C for TIS / MIS
  // Throws unless 0 <= clip_low < 1, 0 <= clip_high, cap >= 1, all finite.
  void validate() const;
};

struct PolicyLossResult {
  double loss = 0;                         // the aggregated loss
  std::vector<std::vector<float>> weight;  // [seq][token]: -dloss/dlogp, 0 where clipped or masked
  int64_t tokens = 0;                      // all response tokens
  int64_t masked = 0;                      // MIS-rejected tokens
  int64_t clipped = 0;                   // kept tokens whose clipped branch is active with the ratio outside the range
  double clip_frac = 0;                  // clipped / (tokens - masked); 0 when no token is kept
  double mask_frac = 0;                  // masked / tokens; 0 when there are no tokens
  double ratio_mean = 0, ratio_max = 0;  // of exp(logp - logp_old) over all tokens; 0 when none
};

// The GRPO policy loss. Per token t of sequence i, ratio r = exp(logp - logp_old),
// A = adv[i], w the rollout weight (1 for None; min(exp(logp_old - logp_rollout), C)
// for TIS; exp(logp_old - logp_rollout) for MIS, the token rejected when that lies
// outside [1/C, C]):
//   l = w * max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))
// Aggregated over kept (not rejected) tokens, with N the kept tokens of the batch,
// n_i those of sequence i and S the sequences with n_i > 0:
//   token-mean           sum_i sum_t l / N
//   seq-mean-token-sum   sum_i (sum_t l) / S
//   seq-mean-token-mean  sum_i (sum_t l / n_i) / S
// A zero denominator gives loss 0. weight[i][t] = -dloss/dlogp_t exactly (w has no
// gradient): A r w / D, D the token's denominator (N, S or S * n_i), when the
// unclipped branch is active (A > 0 and r <= 1 + clip_high, or A < 0 and
// r >= 1 - clip_low, or r inside the range); 0 when clipped, rejected or A = 0.
// Computed in double and rounded to FP32 once, so on policy (logp == logp_old,
// w = 1) weight == float(A / D) exactly.
// logp_rollout may be empty when cfg.correction is None. Shapes must agree (errors
// name the sequence); log-probs and advantages must be finite; cfg is validated.
PolicyLossResult policy_loss(const std::vector<std::vector<float>>& logp,
                             const std::vector<std::vector<float>>& logp_old,
                             const std::vector<std::vector<float>>& logp_rollout, const std::vector<double>& adv,
                             const PolicyLossConfig& cfg);

}  // namespace mxrl
