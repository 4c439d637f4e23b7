"""An mxrl sync bundle as tensors: what the learner sent, in mxrl's names.

A bundle is a safetensors buffer whose ``__metadata__`` is the manifest
(``mxrl.sync.inspect`` verifies its digests). Its tensors already carry the
checkpoint names vLLM's loaders take: an MXFP8 linear is ``X.weight``
(F8_E4M3 codes) plus ``X.weight_scale`` (E8M0 scales, one per 32 values of a
row); everything kept in high precision is ``X`` in BF16 or F32.

``Expected`` holds each tensor's computed values (codes times scales, exactly,
through ``mxrl.dequantize``) as float32, and for MX tensors the code and scale
bytes: the reference every check compares the engine with.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

import mxrl

_NP = {"F32": np.float32, "BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E8M0": np.uint8, "U8": np.uint8}


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_exact(x: np.ndarray, what: str) -> np.ndarray:
    """BF16 bits of float32 values that BF16 represents exactly; raises naming `what` otherwise."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    if np.any(bits & 0xFFFF):
        n = int(np.count_nonzero(bits & 0xFFFF))
        raise ValueError(f"{what}: {n} values are not exactly representable in BF16")
    return (bits >> 16).astype(np.uint16)


@dataclass
class Tensor:
    name: str
    values: np.ndarray  # float32: what the learner computes with
    dtype: str  # "BF16" | "F32" | "F8_E4M3" (MX codes)
    codes: Optional[np.ndarray] = None  # uint8 [N, K] (MX)
    scales: Optional[np.ndarray] = None  # uint8 [N, K/32] (MX)

    @property
    def mx(self) -> bool:
        return self.codes is not None


@dataclass
class Expected:
    version: int
    plan: str
    config: dict
    tensors: Dict[str, Tensor] = field(default_factory=dict)


def parse(bundle: bytes, label: str = "<bundle>") -> Expected:
    """The tensors of a bundle, digests verified (mxrl.sync.inspect), MX tensors dequantized exactly."""
    info = mxrl.sync.inspect(bundle)
    (n,) = struct.unpack("<Q", bundle[:8])
    header = json.loads(bytes(bundle[8 : 8 + n]))
    base = 8 + n
    raw: Dict[str, np.ndarray] = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _NP:
            raise ValueError(f"{label}: {name}: dtype {t['dtype']} is not one a bundle carries")
        a, b = t["data_offsets"]
        raw[name] = np.frombuffer(bundle, dtype=_NP[t["dtype"]], count=(b - a) // np.dtype(_NP[t["dtype"]]).itemsize,
                                  offset=base + a).reshape(t["shape"]).copy()
    dtypes = {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}
    e = Expected(version=int(info["version"]), plan=str(info["plan"]), config=info["config"])
    for name, a in raw.items():
        if name.endswith(".weight_scale"):
            continue
        dt = dtypes[name]
        if dt == "F8_E4M3":
            s = raw.get(name + "_scale")
            if s is None:
                raise ValueError(f"{label}: {name}: MX codes without {name}_scale")
            vals = mxrl.dequantize(a, s, elem="e4m3")
            e.tensors[name] = Tensor(name, np.asarray(vals, dtype=np.float32), dt, a, s)
        elif dt == "BF16":
            e.tensors[name] = Tensor(name, bf16_to_f32(a), dt)
        elif dt == "F32":
            e.tensors[name] = Tensor(name, np.asarray(a, dtype=np.float32), dt)
        else:
            raise ValueError(f"{label}: {name}: dtype {dt} is not a computed tensor's")
    return e


def to_torch(e: Expected, mx_engine: bool) -> Dict[str, "object"]:
    """The tensors vLLM's loader takes for this bundle, in checkpoint format.

    mx_engine: the engine loaded an MXFP8 export (codes + scales go as they are);
    otherwise MX tensors go as their exact BF16 values (the engine computes in BF16).
    """
    import torch

    out = {}
    for name, t in e.tensors.items():
        if t.mx and mx_engine:
            out[name] = torch.from_numpy(np.array(t.codes)).view(torch.float8_e4m3fn)
            out[name + "_scale"] = torch.from_numpy(np.array(t.scales))
        elif t.mx or t.dtype == "BF16":
            out[name] = torch.from_numpy(f32_to_bf16_exact(t.values, name).view(np.int16)).view(torch.bfloat16)
        else:
            out[name] = torch.from_numpy(np.array(t.values))
    return out
