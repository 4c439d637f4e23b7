"""mxrl from Python: bit-exact MX numerics, models and the sampler, weight-sync bundles and checks.

The C++ core (the same code as the ``mxrl`` command line) is the extension
module ``mxrl._mxrl``; this package re-exports it:

- ``quantize`` / ``dequantize``: MX block quantization (E4M3 ... E2M1, E8M0 scales);
  ``fp8_quantize`` / ``fp8_dequantize``: the FP8 grids of other engines;
  ``format_info`` / ``elem_grid``: the element formats.
- ``Model.load(dir, plan)`` with ``.score``, ``.logits`` and ``.trace`` (every activation
  of the learner's forward pass by name); ``Sampler(model).generate``; ``Tokenizer``.
- ``mxrl.ops``: the forward pass's kernels one by one (``Linear``, ``rmsnorm``, ``rope``,
  ``attention``, ``swiglu``, ``moe_route``, ``MoeExperts``, ``log_softmax``, plans), for
  another engine to compute the learner's bits on its own tensors.
- ``mxrl.sync``: ``export``, ``inspect``, ``verify``, ``verify_dump``, ``check_names``.
- ``mxrl.rl``: ``start`` / ``resume`` a GRPO run (``RlRun``) whose rollout and weight
  sync a Python object does (e.g. an adapter over another inference engine).
- ``mxrl.faults``: ``catalogue()``, the sync faults with their names and conditions.
- ``mxrl.tasks.problems`` and ``mxrl.stats`` (``match_sums``, ``bootstrap_mean``,
  ``bootstrap_ratio``): what an experiment over another engine needs to measure
  exactly as ``mxrl experiment matching`` does.

Arrays are read in place (numpy, or torch and others through DLPack) and results
are numpy arrays (``torch.from_dlpack`` shares their memory). Errors the CLI
prints as one line raise ValueError (bad values, shapes) or TypeError (dtypes)
with the same message.
"""

from ._mxrl import (  # noqa: F401
    Model,
    RlRun,
    Sampler,
    Tokenizer,
    __version__,
    dequantize,
    elem_grid,
    format_info,
    fp8_dequantize,
    fp8_quantize,
    quantize,
    tensor_seed,
)
from . import faults, ops, rl, stats, sync, tasks  # noqa: F401

__all__ = [
    "__version__",
    "Model",
    "RlRun",
    "Sampler",
    "Tokenizer",
    "dequantize",
    "elem_grid",
    "faults",
    "format_info",
    "fp8_dequantize",
    "fp8_quantize",
    "ops",
    "quantize",
    "rl",
    "stats",
    "sync",
    "tasks",
    "tensor_seed",
]
