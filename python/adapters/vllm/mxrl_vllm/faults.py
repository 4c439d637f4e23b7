"""Sync faults at vLLM's seams: the refit, its repairs, the prefix cache, the rollback.

The names, conditions and meanings are mxrl's own fault catalogue
(``mxrl.faults.catalogue()``); this module is the one place that says how each
is reproduced in the vLLM path. A fault never touches what the checks compare
against (the learner's bundle, its probe logits): it makes the engine hold or
compute what the real bug would make it hold or compute, through the
``RefitHooks`` the engine exposes.

A fault is named NAME or NAME@STEP: active for every sync of version >= STEP
(default 1), as on ``mxrl rl --inject``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import mxrl

from .engine import Layout, RefitHooks


def _layer_name(w: Dict[str, Any], suffix: str) -> Optional[str]:
    """The first weight of the last layer ending in `suffix` (faults act on one tensor)."""
    names = sorted(n for n in w if n.endswith(suffix) and not n.endswith("_scale"))
    return names[-1] if names else None


def _drop_tensor(w, v, ctx):
    n = _layer_name(w, "self_attn.o_proj.weight")
    w.pop(n)
    w.pop(n + "_scale", None)
    return w


def _drop_experts(w, v, ctx):
    # Every routed expert (the refit's name mapping misses them all): an expert that no token
    # reached keeps its weights from step to step, so one layer's experts may not have changed.
    for n in [n for n in w if ".mlp.experts." in n]:
        w.pop(n)
    return w


def _swap_gate_up(w, v, ctx):
    g = _layer_name(w, "mlp.gate_proj.weight") or _layer_name(w, "experts.0.gate_proj.weight")
    u = g.replace("gate_proj", "up_proj")
    for a, b in ((g, u), (g + "_scale", u + "_scale")):
        if a in w:
            w[a], w[b] = w[b], w[a]
    return w


def _expert_offset(w, v, ctx):
    layer, E = ctx["last_layer"], ctx["experts"]
    pre = f"model.layers.{layer}.mlp.experts."
    moved = {}
    for n, t in w.items():
        if n.startswith(pre):
            e, rest = n[len(pre):].split(".", 1)
            moved[f"{pre}{(int(e) + 1) % E}.{rest}"] = t
    w.update(moved)
    return w


def _transposed(w, v, ctx):
    n = _layer_name(w, "self_attn.o_proj.weight")
    if n + "_scale" in w:  # MX codes travel as they are; a transposed block layout is a grid fault
        raise ValueError("transposed: an MXFP8 engine gets codes and scales, not values; use a BF16 engine")
    w[n] = w[n].t().contiguous()
    return w


def _stale_scales(w, v, ctx):
    prev = ctx["previous"]()
    if prev is None:
        return w
    for n in [n for n in w if n.endswith("_scale")]:
        w[n] = prev[n]
    return w


def _requant_floor(w, v, ctx):
    """The engine re-derives its grid with the floor scale rule from the BF16 values it was sent."""
    import torch

    for n in [n for n in w if n.endswith("proj.weight") and "mlp.gate." not in n]:
        t = w[n]
        if t.dtype != torch.bfloat16:
            raise ValueError("requant-floor: needs a BF16 engine (an MXFP8 engine gets the learner's codes)")
        codes, scales = mxrl.quantize(t.float().numpy(), elem="e4m3", scale_rule="floor")
        w[n] = torch.from_numpy(mxrl.dequantize(codes, scales)).to(torch.bfloat16)
    return w


def _lm_head_fp8(w, v, ctx):
    import torch

    n = "lm_head.weight"
    if n not in w:
        raise ValueError("lm-head-fp8: needs an untied head (a tied one is the embedding)")
    codes, scales = mxrl.quantize(w[n].float().numpy(), elem="e4m3", scale_rule="rceil")
    w[n] = torch.from_numpy(mxrl.dequantize(codes, scales)).to(torch.bfloat16)
    return w


def _router_bf16(w, v, ctx):
    import torch

    for n in [n for n in w if n.endswith("mlp.gate.weight")]:
        # The learner's router values through a cast to FP16 and back: the precision an engine
        # that does not keep the router in the learner's dtype computes with.
        w[n] = w[n].to(torch.float16).to(w[n].dtype)
    return w


@dataclass
class VllmFault:
    name: str
    seam: str  # refit | repairs | prefix | rollback
    needs: str  # "" | "moe" | "tied" | "untied" | "mx" | "bf16"
    edit: Optional[Callable] = None
    what: str = ""


FAULTS: List[VllmFault] = [
    VllmFault("drop-tensor", "refit", "", _drop_tensor, "the refit skips the last layer's o_proj"),
    VllmFault("drop-experts", "refit", "moe", _drop_experts, "the refit skips every routed expert"),
    VllmFault("stale-tied-head", "repairs", "tied", None,
              "vLLM's own refit: the tied head's packed copy is not rebuilt (the adapter's repair is skipped)"),
    VllmFault("swap-gate-up", "refit", "", _swap_gate_up, "gate and up loaded into the fused layer in swapped order"),
    VllmFault("expert-offset", "refit", "moe", _expert_offset, "the last layer's experts loaded one slot off"),
    VllmFault("transposed", "refit", "bf16", _transposed, "the last layer's o_proj loaded transposed"),
    VllmFault("requant-floor", "refit", "bf16", _requant_floor,
              "the engine re-derives the grid with the floor rule from BF16 values"),
    VllmFault("stale-scales", "refit", "mx", _stale_scales, "new codes with the previous version's scales"),
    VllmFault("router-bf16", "refit", "moe", _router_bf16, "the router reaches the engine through a lower precision"),
    VllmFault("lm-head-fp8", "refit", "untied", _lm_head_fp8, "the head arrives quantized to E4M3"),
    VllmFault("stale-packed", "repairs", "moe", None,
              "vLLM's own refit: the experts' CPU pre-pack is not rebuilt (the adapter's repair is skipped)"),
    VllmFault("stale-prefix-cache", "prefix", "", None, "the prefix cache is not reset after the refit"),
    VllmFault("partial-sync", "rollback", "", None,
              "the refit fails half way and the engine serves what it holds (no rollback)"),
]
BY_NAME = {f.name: f for f in FAULTS}


def catalogue() -> List[Dict[str, Any]]:
    """The vLLM faults with mxrl's condition for each (mxrl.faults.catalogue())."""
    native = {f["name"]: f for f in mxrl.faults.catalogue()}
    out = []
    for f in FAULTS:
        if f.name not in native:
            raise RuntimeError(f"vLLM fault {f.name} is not in mxrl's fault catalogue")
        out.append({"name": f.name, "condition": int(native[f.name]["condition"]), "seam": f.seam,
                    "needs": f.needs, "what": f.what})
    return out


def parse(spec: str) -> Tuple[VllmFault, int]:
    name, _, at = spec.partition("@")
    if name not in BY_NAME:
        raise ValueError(f"--inject {spec}: not a fault of the vLLM path (one of: {', '.join(BY_NAME)})")
    try:
        step = int(at) if at else 1
    except ValueError:
        raise ValueError(f"--inject {spec}: STEP must be an integer") from None
    if step < 1:
        raise ValueError(f"--inject {spec}: STEP must be >= 1")
    return BY_NAME[name], step


def applies(f: VllmFault, layout: Layout) -> Optional[str]:
    """Why fault `f` cannot apply to this engine, or None."""
    need = {"moe": layout.experts > 0, "tied": layout.tied, "untied": not layout.tied, "mx": layout.mx,
            "bf16": not layout.mx, "": True}[f.needs]
    what = {"moe": "a MoE model", "tied": "a tied head", "untied": "an untied head", "mx": "an MXFP8 engine",
            "bf16": "a BF16 engine"}
    return None if need else f"{f.name} needs {what[f.needs]}"


class FaultHooks(RefitHooks):
    """RefitHooks that inject the named faults from their step on."""

    def __init__(self, specs: List[str], layout: Layout, previous_weights: Callable[[], Optional[dict]]):
        self.active = [parse(s) for s in specs]
        for f, _ in self.active:
            why = applies(f, layout)
            if why:
                raise ValueError(f"--inject {f.name}: {why}")
        self.ctx = {"last_layer": layout.layers - 1, "experts": layout.experts, "previous": previous_weights}

    def _on(self, seam: str, version: int) -> List[VllmFault]:
        return [f for f, step in self.active if f.seam == seam and version >= step]

    def edit_weights(self, weights, version):
        for f in self._on("refit", version):
            weights = f.edit(weights, version, self.ctx)
        return weights

    def interrupt_after(self, version):
        return 5 if self._on("rollback", version) else None

    def skip_rollback(self, version):
        return bool(self._on("rollback", version))

    def skip_repairs(self, version):
        return bool(self._on("repairs", version))

    def skip_prefix_reset(self, version):
        return bool(self._on("prefix", version))
