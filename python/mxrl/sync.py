"""Weight-sync bundles and the manifest checks (docs/reference.md §6), from Python.

A bundle is the safetensors file (or buffer) of one weight version as it moves
from a learner to a sampler: tensors are the payload, ``__metadata__`` the
manifest with one XXH3 digest per part. ``inspect`` verifies every digest.

``verify`` and ``verify_dump`` report conditions 1-4 -- coverage, placement,
grid identity, high-precision exceptions -- as
``{condition: {"passed": bool, "findings": [str, ...]}}``, one finding per line
naming the tensor, exactly as ``mxrl verify-sync`` and the live checks of
``mxrl rl`` word them.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union

from . import _mxrl

Manifest = List[Dict[str, Any]]
Findings = Dict[str, Dict[str, Any]]
BundleLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Dict[str, Any], Manifest]

__all__ = ["check_names", "export", "inspect", "verify", "verify_dump", "write_dump", "dump_manifest"]


def check_names() -> List[str]:
    """The seven live checks, in condition order: coverage, placement, grid, exceptions,
    freshness, atomicity, agreement (the names a sync report's checks carry)."""
    return _mxrl._sync_check_names()


def export(
    model_dir: Union[str, "os.PathLike[str]"],
    out: Union[str, "os.PathLike[str]"],
    recipe: str = "mxfp8",
    sync: str = "ship",
    sampler_plan: Optional[str] = None,
    version: int = 0,
    floor: bool = False,
    threads: int = 0,
) -> Dict[str, Any]:
    """Write the bundle a learner under ``recipe`` sends for weight ``version`` of a checkpoint.

    sync: "ship" (the learner's own forward weights, byte for byte: MX codes and
    E8M0 scales) or "requantize" (BF16 copies the sampler quantizes itself).
    sampler_plan: ship only, the sampler's plan (default: the recipe's).
    floor: the floor scale rule instead of rceil for MX linears.
    The file is byte for byte what ``mxrl sync export`` writes; returns ``inspect(out)``.
    """
    _mxrl._sync_export(os.fspath(model_dir), os.fspath(out), recipe, sync, sampler_plan, version, floor, threads)
    return inspect(out)


def inspect(bundle: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]) -> Dict[str, Any]:
    """Parse a bundle (a path or its bytes), verify every digest, and return its header and manifest:
    ``{format, version, sync, recipe, plan, config, manifest}`` as ``mxrl sync inspect --json`` prints it.
    Raises ValueError naming the problem (and the tensor) for a malformed or corrupted bundle."""
    if isinstance(bundle, (bytes, bytearray, memoryview)):
        return _mxrl._sync_inspect_bytes(bytes(bundle), "<bytes>")
    return _mxrl._sync_inspect_file(os.fspath(bundle))


def _manifest(x: BundleLike, what: str) -> Manifest:
    if isinstance(x, dict):
        if "manifest" not in x:
            raise ValueError(f"{what}: a dict must be what inspect() returns (it has no 'manifest')")
        return x["manifest"]
    if isinstance(x, list):
        return x
    if isinstance(x, (str, os.PathLike, bytes, bytearray, memoryview)):
        return inspect(x)["manifest"]
    raise TypeError(f"{what}: expected a bundle path or bytes, an inspect() dict or a manifest list, "
                    f"got {type(x).__name__}")


def verify(expected: BundleLike, got: BundleLike, previous: Optional[BundleLike] = None) -> Findings:
    """Conditions 1-4 of what a sampler holds (``got``) against what it should hold (``expected``).

    Each side is a bundle (path or bytes), an ``inspect()`` dict, a manifest list,
    or e.g. ``Model.manifest()``. Returns ``{coverage, placement, grid, exceptions}``,
    each ``{"passed": bool, "findings": [...]}``.

    previous: what the sampler held before this sync (same forms). A tensor that should
    have changed but still holds its previous bytes is then a coverage finding (the sync
    never wrote it) rather than bytes that differ (grid / exceptions), as with
    ``verify_dump(previous=...)``.
    """
    prev = _manifest(previous, "previous") if previous is not None else None
    return _mxrl._sync_check_manifests(_manifest(expected, "expected"), _manifest(got, "got"), prev)


def verify_dump(
    learner: Union[str, "os.PathLike[str]"],
    dump: Union[str, "os.PathLike[str]"],
    recipe: str = "mxfp8",
    naming: str = "vllm",
    floor: bool = False,
    previous: Optional[Union[str, "os.PathLike[str]"]] = None,
    threads: int = 0,
) -> Findings:
    """Conditions 1-4 of the weights an inference engine holds, dumped to safetensors, against what
    the learner checkpoint ``learner`` under ``recipe`` says it should hold: ``mxrl verify-sync``.

    naming: "vllm" (the default, as the CLI's: vLLM's Qwen3 / Qwen3-MoE
    parameters: fused qkv_proj and gate_up_proj, stacked experts w13/w2, weight and
    weight_scale pairs) or "mxrl" (the bundle's tensor names).
    previous: the engine's dump from before this sync (``mxrl verify-sync --previous-dump``): a
    tensor the sync never wrote, still holding those bytes, is then a coverage finding rather
    than bytes that differ (grid / exceptions).
    """
    prev = os.fspath(previous) if previous is not None else None
    return _mxrl._sync_verify_dump(os.fspath(learner), os.fspath(dump), recipe, floor, naming, prev, threads)


def write_dump(model: "_mxrl.Model", path: Union[str, "os.PathLike[str]"], naming: str = "vllm") -> None:
    """Write what ``model`` computes with as an engine weight dump in ``naming`` ("mxrl" or "vllm")."""
    _mxrl._sync_write_dump(model, os.fspath(path), naming)


def dump_manifest(dump: Union[str, "os.PathLike[str]"], model: "_mxrl.Model", naming: str = "vllm") -> Manifest:
    """The manifest an engine weight dump holds, under mxrl's names (un-fusing vLLM's tensors by
    ``model``'s config; MX precision labels take ``model``'s plan)."""
    return _mxrl._sync_dump_manifest(os.fspath(dump), model, naming)
