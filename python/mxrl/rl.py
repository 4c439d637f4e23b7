"""GRPO runs driven from Python, with the rollout and the weight sync done by a Python object.

``start`` / ``resume`` open the run ``mxrl rl`` runs (the task, rewards, the
learner's scoring and PPO-clip updates, the sync bundle of every new weight
version, the check of its findings), with one difference: the sampler is a
Python object, the *remote*, e.g. an adapter over another inference engine.
The learner and the bundles stay mxrl's, bit for bit; the remote generates and
applies the bundles, and runs the checks against what its engine then holds.

The remote protocol (any object with these two methods)::

    remote.generate(step: int, requests: list[dict]) -> list[dict]

Step ``step``'s rollout. Each request is ``{"id": int, "prompt": list[int], "n": int,
"max_new_tokens": int, "temperature": float, "stop_tokens": list[int], "seed": int}``
(the P prompts of the step, n = G samples each; sampling is plain: no top-p or top-k).
Return one dict per sample, n per request, in any order::

    {"request": int,            # the request's id
     "index": int,              # 0 .. n-1, each once
     "tokens": list[int],       # the generated tokens only, 1 .. max_new_tokens of them;
                                # a sample that stopped keeps its stop token last
     "logprobs": list[float],   # per token, at the request's temperature
     "finish": "stop" | "length",
     "version": int,            # the weight version it was generated under (the last
                                # version the remote applied); the run refuses samples
                                # older than the learner's version under checks="stop"
     "token_versions": list[int],   # optional: per token (default: all = version)
     "logits": numpy.ndarray}   # optional: float32 [len(tokens), vocab], the full row each
                                # token was drawn from (log-probs do too: only their
                                # softmax is used); absent or None: the step's exact-KL
                                # figures (mismatch.kl_*) are left unknown

Lists may also be 1-D numpy arrays. Every field is checked: a wrong type, a length
that does not match, an unknown key, a request without exactly n samples raises
ValueError naming the sample and the field, e.g.
``remote.generate: sample 3 (request 7): logprobs has 5 entries for 6 tokens``.

::

    remote.sync(version: int, bundle: bytes, reference: dict) -> dict

Weight version ``version`` (0 at the start, the learner's step count after each step).
``bundle`` is the weight-sync bundle, the same bytes ``mxrl sync export`` writes and the
MPI runtime sends (``mxrl.sync.inspect(bundle)`` reads it; faults at the learner's seam
named in the config's ``inject`` are already in it). ``reference`` is what the checks
compare against::

    {"manifest": list[dict],    # what the sampler should hold (form of Model.manifest())
     "expected_bundle": bytes,  # the bundle as built with no learner-seam fault: the tensors
                                # the sampler should hold (== bundle when none is injected)
     "agreement": bool,         # whether the agreement check is due at this version
     "probe_logits": [numpy float32 [len, vocab], ...],   # only when agreement: the
                                # learner's logits of each probe sequence
     "probe": {"tokens": list[list[int]], "prompt_len": list[int], "temperature": float},
     "bound": {"bitwise": bool, "max_kl": float, "max_abs_dlogp": float},
     "checks": "stop" | "warn" | "off",
     "plan": str}               # the sampler plan the bundle is for

Return the report::

    {"applied": bool,           # the sampler now serves `version`
     "error": str,              # required when not applied: why
     "bytes": int,              # optional: bytes received (default len(bundle))
     "apply_seconds": float, "check_seconds": float,
     "checks": [{"name": str,   # one of mxrl.sync.check_names(), each at most once
                 "ran": bool, "passed": bool,
                 "findings": list[str],   # one line each; a failed check has at least one
                 "seconds": float,
                 "measured": dict}]}      # optional (agreement: the KL / |dlogp| figures)

``mxrl.sync.verify(reference["manifest"], what_the_engine_holds, previous=...)`` gives
conditions 1-4 with mxrl's findings. Under checks="stop" a report that is not applied,
or has a failed check that ran, ends the run with ValueError naming the findings.

Exceptions raised in the remote or in a callback propagate out of ``start``, ``run``,
``step_once`` unchanged. A run whose remote.sync raised has taken the step (``run.step``
advanced) while the sampler may not hold the new version; ``save`` still writes the
learner's state, and ``resume`` syncs it to the remote first.

Not supported with a Python remote (ValueError at start): ``off_policy`` > 0, and
``inject`` of faults outside the learner's seam (the remote's engine is where those
live; ``mxrl.faults.catalogue()`` names them for the remote to inject itself).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Union

from ._mxrl import RlRun

__all__ = ["RlRun", "start", "resume"]

PathLike = Union[str, "os.PathLike[str]"]
Callback = Optional[Callable[[Dict[str, Any]], Any]]


def start(model_dir: PathLike, config: Optional[Dict[str, Any]] = None, remote: Any = None,
          threads: int = 0) -> RlRun:
    """A new GRPO run of the checkpoint ``model_dir`` with ``remote`` as its sampler.

    config: the RL settings to change from the defaults, in the form ``run.config`` shows
    (the keys of ``mxrl rl``'s options with _ for -; the optimizer's under "optim", e.g.
    ``{"steps": 20, "prompts_per_step": 4, "optim": {"lr": 1e-4}}``). An unknown key, a wrong
    type or a value out of bounds raises ValueError naming the key.
    threads: the learner's threads (0: every core).

    Syncs version 0 to the remote before returning (its first ``sync`` call; the report is
    ``run.last_sync``). Returns the run: ``run.run(out_dir, on_step=, on_eval=, on_sync=)``,
    ``run.step_once()``, ``run.evaluate()``, ``run.save(dir)``, ``run.step``, ``run.config``,
    ``run.probe``, ``run.learner_manifest()``.
    """
    if remote is None:
        raise TypeError("start: remote is required (an object with generate() and sync(); see mxrl.rl)")
    return RlRun.start(os.fspath(model_dir), config, remote, threads)


def resume(state_dir: PathLike, remote: Any, threads: int = 0) -> RlRun:
    """Continue a run from a training state saved by ``run.save`` or ``run.run`` (its
    step-NNNNNN or final folder), with its saved settings; syncs the saved version to
    ``remote`` first."""
    return RlRun.resume(os.fspath(state_dir), remote, threads)
