// The forward pass over a KV cache, shared by the learner and the sampler:
// that sharing is what makes their log-probs agree bit for bit.
#pragma once
#include <cstdint>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "model/trace.h"
#include "model/workspace.h"

namespace mxrl {

// Runs the model on the batch, appending each token's keys and values to
// the cache, and writes logits[n, vocab] — or, when `rows` is given, only the
// logits of those batch rows, logits[rows.size(), vocab]. Every row's logits
// are bitwise independent of the other rows of the call, of which rows are
// asked for, and of the thread count.
// With `trace`, also records what the backward needs (rows must then be null).
// `workspace` (null: one made for this call) holds every intermediate; pass the
// same one to every call and forward() stops allocating once it has grown.
// `fo`: another engine's departures from the contract (model/linear.h; the
// sampler's option, {} for everything else).
void forward(const Model& model, KvCache& cache, const TokenBatch& batch, float* logits, const Exec& exec = {},
             const std::vector<int64_t>* rows = nullptr, ForwardTrace* trace = nullptr,
             ForwardWorkspace* workspace = nullptr, const ForwardOptions& fo = {});

}  // namespace mxrl
