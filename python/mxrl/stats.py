"""The mismatch measurement of mxrl's matching experiment, for samplers outside mxrl.

The same C++ as ``mxrl experiment matching`` (``experiments/matching.h``), so an
experiment over another engine (an adapter's) measures the exact same way:

- ``match_sums(sampler_rows, learner_rows, tokens, temperature=1.0)``: one
  sample's sums over its generated tokens, given the sampler's and the learner's
  full rows ``[T, vocab]`` (float32 logits or log-probs; each row is softmaxed at
  the temperature, in double): ``tokens``, ``kl`` (exact KL(p_sampler || p_learner)
  summed), ``k3``, ``abs_dlogp`` (sum), ``abs_dlogp_max``, ``unequal`` (tokens whose
  log-probs differ at all).
- ``bootstrap_mean(tokens, kl, reps, seed)``: sum(kl) / sum(tokens) over prompts
  (per-prompt sums) with a 95% percentile bootstrap over prompts: (mean, lo, hi).
- ``bootstrap_ratio(tokens_a, kl_a, tokens_b, kl_b, reps, seed)``: the ratio of two
  configurations' mean KL over the same prompts, paired bootstrap: (ratio, lo, hi).
"""

from __future__ import annotations

from . import _mxrl

__all__ = ["bootstrap_mean", "bootstrap_ratio", "match_sums"]

match_sums = _mxrl._stats_match_sums
bootstrap_mean = _mxrl._stats_bootstrap_mean
bootstrap_ratio = _mxrl._stats_bootstrap_ratio
