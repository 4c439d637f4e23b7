"""mxrl_vllm: mxrl's adapter for vLLM.

vLLM runs a model that mxrl exported (``mxrl export --format
compressed-tensors``) with its MXFP8 linear layers computed from the exported
bytes, and mxrl checks what the engine holds. The adapter reaches mxrl only
through mxrl's public Python API (``import mxrl``).

- ``mxrl_vllm.plugin``: the vLLM general plugin (entry point
  ``vllm.general_plugins`` / ``mxrl_mxfp8``) that registers
  ``MxrlMxfp8LinearKernel`` for vLLM's CPU platform, which lists no MXFP8
  linear kernel of its own. The kernel keeps each layer's E4M3 codes and E8M0
  scales as loaded and computes with a BF16 copy that ``mxrl.dequantize``
  derives from them, exactly.
- ``mxrl_vllm.engine``: ``VllmEngine``, a live in-process ``vllm.LLM`` as mxrl's
  sampler: generation with full-vocabulary log-prob rows, refits through vLLM's
  own ``reload_weights`` (all or nothing), the repairs vLLM's CPU build needs.
- ``mxrl_vllm.checks``: the seven sync checks on what the engine computes with
  (read where readable, probed through each layer's own op where not).
- ``mxrl_vllm.faults`` / ``mxrl_vllm.matrix``: sync faults at vLLM's seams under
  mxrl's fault names, and the fault matrix.
- ``mxrl_vllm.rl``: GRPO with mxrl's learner (``mxrl.rl``) and vLLM sampling.
- ``mxrl_vllm.bundle``: an mxrl sync bundle as tensors.
- ``python -m mxrl_vllm`` / ``mxrl-vllm``: the command line (``rl``, ``faults``, ``check``).

Importing this package does not import vLLM or torch; the submodules that need
them import them when they are imported.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mxrl-vllm")
except PackageNotFoundError:  # run from a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
