"""The sync-fault catalogue (docs/reference.md §6), from Python.

Each fault is a weight-sync bug injected where the real bug would live, and
breaks one of the seven conditions the live checks verify. An adapter over
another inference engine that injects faults of its own names them, and
expects them caught, as this catalogue does, so that its fault runs compare
with ``mxrl rl --inject`` and ``mxrl faults``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from . import _mxrl

__all__ = ["catalogue"]


def catalogue() -> List[Dict[str, Any]]:
    """Every fault, in condition order, as a dict:

    - ``name``: as ``--inject`` and the config's ``inject`` take it ("swap-gate-up");
    - ``condition``: the condition it breaks, 1..7, and ``check``: that check's name
      ("coverage", "placement", "grid", "exceptions", "freshness", "atomicity", "agreement");
    - ``seam``: where it lives: "learner" (the bundle built), "channel" (the bytes on the way),
      "loader" (the sampler writing weights) or "engine" (the sampler computing);
    - ``needs_moe``, ``needs_tied_head``, ``needs_requantize``, ``needs_fp8_kv``, ``needs_mpi``:
      what the fault needs to apply at all (a MoE model, a tied lm_head, sync="requantize",
      a sampler plan with an FP8 KV cache, a separate sampler process);
    - ``what``: one line, what goes wrong.
    """
    return _mxrl._faults_catalogue()
