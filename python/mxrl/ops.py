"""mxrl's forward kernels one by one, for another inference engine (vLLM through an
adapter) to run on its own tensors and get the learner's bits.

Each op is the library function mxrl's ``forward()`` calls, called the same way:

- ``Linear(weight, precision=...)`` or ``Linear(codes=..., scales=..., precision="mxfp8")``
  with ``.forward(x)``, ``.codes()``, ``.scales()``, ``.n``, ``.k``, ``.precision``, ``.name``;
- ``rmsnorm``, ``rope``, ``swiglu``, ``attention``, ``log_softmax``;
- ``moe_route`` and ``MoeExperts(gate, up, down).forward(x, experts, weights)``;
- ``plan_precision(plan, linear, layer, expert)`` and ``plan_info(plan)``: what a plan
  computes each linear in, and whether embeddings/norms are BF16 and the KV cache FP8;
- ``set_threads(n)`` / ``get_threads()``: the one thread pool every op runs on
  (default: every hardware thread); results do not depend on it.

Arrays are float32 (positions and expert ids int64 or int32), C-contiguous, numpy or
anything with DLPack (torch), read in place; results are new numpy float32 arrays.
``mxrl.Model.trace`` gives the activations to compare with, by name.
"""

from ._mxrl import ops as _ops

Linear = _ops.Linear
MoeExperts = _ops.MoeExperts
attention = _ops.attention
get_threads = _ops.get_threads
log_softmax = _ops.log_softmax
moe_route = _ops.moe_route
plan_info = _ops.plan_info
plan_precision = _ops.plan_precision
rmsnorm = _ops.rmsnorm
rope = _ops.rope
set_threads = _ops.set_threads
swiglu = _ops.swiglu

__all__ = [
    "Linear",
    "MoeExperts",
    "attention",
    "get_threads",
    "log_softmax",
    "moe_route",
    "plan_info",
    "plan_precision",
    "rmsnorm",
    "rope",
    "set_threads",
    "swiglu",
]
