// Scoring: per-token log-probs of given sequences under a prepared model,
// through the same forward pass generation uses.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace mxrl {

struct ScoreRequest {
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;  // score tokens[prompt_len .. len-1] (prompt_len >= 1)
};

struct ScoreOptions {
  int64_t max_batch_tokens = 4096;  // tokens per forward call (sequences are packed)
  int64_t chunk = 0;                // > 0: feed each sequence at most `chunk` tokens per call
};

// out[i][t - prompt_len] = log p(tokens[t] | tokens[<t]) at temperature 1.
// Bitwise independent of which sequences share a call and of the options.
// `fo`: another engine's departures from the contract (the sampler's; model/linear.h).
std::vector<std::vector<float>> score_sequences(const Model& model, const std::vector<ScoreRequest>& reqs,
                                                const ScoreOptions& opt = {}, const Exec& exec = {},
                                                const ForwardOptions& fo = {});

// FP32 logits [len, vocab] of one sequence (for tests against references).
std::vector<float> sequence_logits(const Model& model, const std::vector<int32_t>& tokens, const Exec& exec = {},
                                   const ForwardOptions& fo = {});

}  // namespace mxrl
