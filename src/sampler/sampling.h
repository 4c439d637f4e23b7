// Token sampling: the per-step primitives of the rollout engine.
//
// Randomness is counter-based: the uniform draw for one step of one sample is
// a pure function of (seed, request, sample, step), so a sample's tokens never
// depend on batch composition, scheduling or thread count.
//
// Log-probs are computed by the canonical kernels (kernels/ops/ops.h,
// log_softmax_gather), so at temperature 1 the value equals, bit for bit, what
// `mxrl score` computes from the same logits.
//
// Selection semantics of sample_token for T > 0 (in exactly this order, so
// results are reproducible on every machine and SIMD backend):
//   x    = logits / T in FP32 (x = logits when T == 1: no division);
//   p    = softmax(x) in FP32 by the canonical kernel (softmax_forward:
//          max-subtracted, exp_f, canonical sum, division); sums below are
//          FP64 over these p;
//   order: p descending, ties (equal p) by lower token id;
//   C    = the first top_k tokens of that order when 0 < top_k < vocab, else all;
//   W_C  = sum of p over C in increasing token id;
//   K    = if top_p < 1: the shortest prefix of C (in the order) whose running
//          sum (accumulated in the order) is >= top_p * W_C, at least one
//          token; C whole if rounding keeps the running sum below the target;
//          else K = C;
//   W_K  = sum of p over K in increasing token id;
//   draw: walk K in increasing token id accumulating p; the token is the first
//         whose running sum is > u * W_K (its renormalized cumulative
//         probability exceeds u); if rounding leaves none, the last token of K
//         with p > 0.
// Tokens with p == 0 (masked by -inf, or underflowed) are never drawn.
// The draw walks the kept set in token-id order, not in probability order: the
// token depends only on the kept set and u, so keeping everything (top_k >=
// vocab, or a top_p whose prefix covers the vocabulary) gives the same token as
// no filtering, and the unfiltered case needs no sort.
//
// Cost for a vocabulary of n: a pass to scale and check, the softmax, the
// log-prob (the canonical log-softmax), then without filtering two FP64
// passes; with top_k a partial selection, O(n log k); with top_p alone a sort
// (stable radix) of only the tokens above a probability threshold, lowered
// until they hold the top_p mass; the full vocabulary only in the worst case.
//
// T == 0 is greedy: the argmax of the raw logits (ties to the lower id); u,
// top_p and top_k are ignored, and the log-prob is at temperature 1.
//
// Logits must not be NaN or +inf (nor become +inf when divided by T), and at
// least one must be > -inf; otherwise mxrl::Error. -inf logits are allowed
// (masked tokens: probability 0, never drawn).
#pragma once
#include <cstdint>
#include <vector>

namespace mxrl {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, ties to the lower id); > 0: sample from softmax(logits / T)
  float top_p = 1.0f;        // (0, 1]
  int64_t top_k = 0;         // 0: off
  // Throws mxrl::Error for T < 0, non-finite T, top_p NaN or outside (0, 1], top_k < 0.
  void validate() const;
};

// The uniform draw in [0, 1) for step `step` of sample `sample` of request
// `request` under `seed` (53 random bits, a multiple of 2^-53):
//   h = mix(seed + G); h = mix(h + mix(request + 2G));
//   h = mix(h + mix(sample + 3G)); h = mix(h + mix(step + 4G));
//   u = (h >> 11) * 2^-53
// with mix = splitmix64_mix and G = kGolden (numerics/rng.h), all mod 2^64.
double sample_uniform(uint64_t seed, uint64_t request, uint64_t sample, uint64_t step);

struct Sampled {
  int32_t token;
  float logprob;  // log_softmax(logits / T)[token] (T == 0: temperature 1); top_p/top_k not applied
};

// Picks a token from logits[vocab] with the draw u in [0, 1) (semantics above)
// and returns it with its log-prob under the policy at the sampling
// temperature. scratch is reused between calls (it holds logits / T and the
// probabilities); the other working buffers are thread-local, so concurrent
// calls from different threads (each with its own scratch) are safe.
Sampled sample_token(const float* logits, int64_t vocab, const SamplingParams& p, double u,
                     std::vector<float>& scratch);

// log_softmax(logits / T)[token], exactly as sample_token computes it (T == 0
// or T == 1: the raw logits, bitwise the value `mxrl score` gives). For
// scoring at a temperature.
float token_logprob(const float* logits, int64_t vocab, float temperature, int32_t token, std::vector<float>& scratch);

}  // namespace mxrl
