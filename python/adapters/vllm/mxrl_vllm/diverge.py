"""Per-layer activations of a live vLLM engine, by the names of mxrl's ``Model.trace``.

``capture_live(engine, tokens)`` runs `tokens` as one prompt (one prefill; full
prompt log-prob rows) on a ``VllmEngine`` with forward hooks on vLLM's
Qwen3 / Qwen3-MoE modules, and returns float32 numpy arrays:

- ``embed``: ``model.embed_tokens``'s output;
- per layer l: ``input_layernorm`` (its normed output), ``qkv_proj``,
  ``rotary_q`` / ``rotary_k`` (the rotary embedding's outputs: after
  q_norm/k_norm and RoPE), ``attn`` (the attention op's output, before o_proj),
  ``residual_mid`` (the residual stream ``post_attention_layernorm`` returns:
  the fused add of the attention output), ``post_attention_layernorm``,
  dense ``gate_up_proj`` and ``act`` (``act_fn``'s output), MoE ``router``
  (the gate's logits), and ``out``: the residual stream leaving the layer,
  hidden + residual as the next fused add+norm adds them, summed here in
  float32 from that op's inputs (the next layer's ``input_layernorm`` or,
  after the last layer, the final ``norm``);
- ``norm``; ``logits`` (the logits processor's outputs, vocabulary padding
  cut off); ``logprobs`` (rows 0..n-2 from the prompt log-probs, row n-1 from
  the first sampled token's full log-prob row).

vLLM's fused add+norm works in place on its inputs, and one rotary module is
shared by every layer (the layer being run is tracked by a pre-hook on each
decoder layer), so everything is copied as it is seen. Only calls with the
prompt's n rows count; the prefix cache is reset first so that all n tokens
are computed, and a point seen twice (the prompt run in pieces) is an error.

``capture`` / ``capture_mxrl_linear`` / ``capture_mxrl`` are the engines
``vllm``, ``vllm-mxrl-linear``, ``vllm-mxrl`` of ``mxrl.diverge`` (entry-point
group ``mxrl.engines``): each starts a ``VllmEngine`` on the checkpoint (or
``engine_model``), captures, and closes it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np


def _f32(t: Any) -> np.ndarray:
    import torch

    return t.detach().to(device="cpu", dtype=torch.float32, copy=True).numpy()


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


class _Recorder:
    def __init__(self, n: int) -> None:
        self.n = n
        self.store: Dict[str, np.ndarray] = {}
        self.logit_calls: List[np.ndarray] = []
        self.layer: Optional[int] = None
        self.twice: List[str] = []

    def put(self, name: str, t: Any) -> None:
        if t is None or t.dim() == 0 or t.shape[0] != self.n:
            return  # not the prompt's prefill (a dummy run or a single-row call)
        if name in self.store:
            self.twice.append(name)
        self.store[name] = _f32(t).reshape(self.n, -1)

    def put_sum(self, name: str, x: Any, r: Any) -> None:
        if x is None or r is None or x.shape[0] != self.n:
            return
        self.put(name, x.detach().float() + r.detach().float())

    def lname(self, op: str) -> str:
        return f"layers.{self.layer}.{op}"


def _install(model: Any, rec: _Recorder) -> List[Any]:
    """Hooks on `model` (vLLM's Qwen3 / Qwen3-MoE ...ForCausalLM); returns their handles."""
    inner = model.model
    layers = list(inner.layers)
    hs: List[Any] = []

    def fwd(mod: Any, fn: Callable[..., None]) -> None:
        hs.append(mod.register_forward_hook(fn, with_kwargs=True))

    def pre(mod: Any, fn: Callable[..., None]) -> None:
        hs.append(mod.register_forward_pre_hook(fn, with_kwargs=True))

    def args2(args: tuple, kwargs: dict):
        x = args[0] if args else kwargs.get("x", kwargs.get("hidden_states"))
        r = args[1] if len(args) > 1 else kwargs.get("residual")
        return x, r

    fwd(inner.embed_tokens, lambda m, a, k, out: rec.put("embed", _first(out)))

    for i, layer in enumerate(layers):
        def enter(m, a, k, i=i):
            rec.layer = i

        pre(layer, enter)

        def in_norm_pre(m, a, k, i=i):
            x, r = args2(a, k)
            if r is not None and i > 0:  # the fused add of the previous layer's output
                rec.put_sum(f"layers.{i - 1}.out", x, r)

        pre(layer.input_layernorm, in_norm_pre)
        fwd(layer.input_layernorm, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.input_layernorm", _first(out)))
        attn = layer.self_attn
        fwd(attn.qkv_proj, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.qkv_proj", _first(out)))
        fwd(attn.attn, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.attn", _first(out)))

        def post_norm(m, a, k, out, i=i):
            if isinstance(out, (tuple, list)):
                rec.put(f"layers.{i}.residual_mid", out[1])
                rec.put(f"layers.{i}.post_attention_layernorm", out[0])
            else:
                rec.put(f"layers.{i}.post_attention_layernorm", out)

        fwd(layer.post_attention_layernorm, post_norm)
        mlp = layer.mlp
        if hasattr(mlp, "experts") and hasattr(mlp, "gate"):
            fwd(mlp.gate, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.router", _first(out)))
        else:
            if hasattr(mlp, "gate_up_proj"):
                fwd(mlp.gate_up_proj, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.gate_up_proj", _first(out)))
            if hasattr(mlp, "act_fn"):
                fwd(mlp.act_fn, lambda m, a, k, out, i=i: rec.put(f"layers.{i}.act", _first(out)))

    # rotary_emb may be one module shared by all layers (get_rope caches them): name by the running layer
    seen = set()
    for layer in layers:
        rot = layer.self_attn.rotary_emb
        if id(rot) in seen:
            continue
        seen.add(id(rot))

        def rope(m, a, k, out):
            if rec.layer is not None and isinstance(out, (tuple, list)) and len(out) >= 2:
                rec.put(rec.lname("rotary_q"), out[0])
                rec.put(rec.lname("rotary_k"), out[1])

        fwd(rot, rope)

    last = len(layers) - 1

    def final_pre(m, a, k):
        x, r = args2(a, k)
        rec.put_sum(f"layers.{last}.out", x, r)

    pre(inner.norm, final_pre)
    fwd(inner.norm, lambda m, a, k, out: rec.put("norm", _first(out)))
    lp = getattr(model, "logits_processor", None)
    if lp is not None:
        def logits(m, a, k, out):
            if out is not None and out.dim() == 2:
                rec.logit_calls.append(_f32(out))

        fwd(lp, logits)
    return hs


def capture_live(engine: Any, tokens: Sequence[int]) -> Dict[str, np.ndarray]:
    """The captures of one prefill of `tokens` on a live ``VllmEngine`` (see the module's docstring)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from .engine import fill_row

    toks = [int(t) for t in tokens]
    n = len(toks)
    if n < 3:
        raise ValueError(f"{n} tokens: the capture needs at least 3")
    if engine.broken:
        raise RuntimeError(f"vLLM engine refuses to run: {engine.broken}")
    vocab = engine.layout.vocab
    rec = _Recorder(n)
    handles = engine.call(lambda model: _install(model, rec))
    try:
        if not engine.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache (requests still running)")
        rec.store.clear()
        rec.logit_calls.clear()
        sp = SamplingParams(max_tokens=1, prompt_logprobs=-1, logprobs=-1, detokenize=False, temperature=0.0)
        out = engine.llm.generate([TokensPrompt(prompt_token_ids=toks)], sp, use_tqdm=False)[0]
    finally:
        for h in handles:
            h.remove()
    if rec.twice:
        raise RuntimeError(f"captured more than once: {', '.join(sorted(set(rec.twice)))} (vLLM ran the "
                           f"prompt in pieces? raise max_num_batched_tokens)")
    if "embed" not in rec.store:
        raise RuntimeError(f"no prefill of the {n} prompt tokens was seen (vLLM padded or split the batch)")
    res = dict(rec.store)
    # logits: the prompt log-probs' call covers positions 0..n-2, the sampler's the last one
    full = [c for c in rec.logit_calls if c.shape[0] == n]
    if full:
        res["logits"] = full[0][:, :vocab]
    else:
        head = [c for c in rec.logit_calls if c.shape[0] == n - 1]
        tail = [c for c in rec.logit_calls if c.shape[0] == 1]
        if head and tail:
            res["logits"] = np.concatenate([head[0], tail[0]])[:, :vocab]
    rows = np.full((n, vocab), -np.inf, dtype=np.float32)
    filled = np.zeros(n, dtype=bool)
    for t, d in enumerate((out.prompt_logprobs or [])[1:]):
        if d:
            fill_row(rows[t], d)
            filled[t] = True
    c = out.outputs[0] if out.outputs else None
    if c is not None and c.logprobs:
        fill_row(rows[n - 1], c.logprobs[0])
        filled[n - 1] = True
    if filled.all():
        res["logprobs"] = rows
    return res


def _engine_kwargs(kernels: Optional[str], plan: str, extra: Dict[str, Any]) -> Dict[str, Any]:
    """VllmEngine's arguments: `kernels` and (for mxrl's kernels, which compute under it) the learner's plan."""
    kw = dict(extra)
    if kernels is not None:
        kw["kernels"] = kernels
        if kernels != "vllm":
            kw.setdefault("plan", plan)
    return kw


def capture(model_dir: str, plan: str = "mxfp8", tokens: Sequence[int] = (), *, engine_model: Optional[str] = None,
            kernels: Optional[str] = None, engine: Any = None, **engine_kwargs: Any) -> Dict[str, np.ndarray]:
    """The engine ``vllm``: a VllmEngine on `engine_model` (default the checkpoint), vLLM's own kernels.

    plan is the learner's (vLLM computes as its checkpoint and kernels say);
    engine: a live VllmEngine to use instead of starting one; kernels: passed to
    VllmEngine (``mxrl-linear``, ``mxrl``); engine_kwargs: VllmEngine's others.
    """
    if engine is not None:
        return capture_live(engine, tokens)
    import shutil
    from pathlib import Path

    from .engine import VllmEngine
    from .rl import stage_checkpoint

    kw = _engine_kwargs(kernels, plan, engine_kwargs)
    staged = None
    if engine_model is None and [p for p in Path(model_dir).glob("*.safetensors") if p.name != "model.safetensors"]:
        staged = engine_model = stage_checkpoint(model_dir)  # a training state: vLLM would load the optimizer's too
    try:
        eng = VllmEngine(str(engine_model or model_dir), **kw)
        try:
            return capture_live(eng, tokens)
        finally:
            eng.close()
    finally:
        if staged:
            shutil.rmtree(staged, ignore_errors=True)


def capture_mxrl_linear(model_dir: str, plan: str = "mxfp8", tokens: Sequence[int] = (),
                        **opts: Any) -> Dict[str, np.ndarray]:
    """The engine ``vllm-mxrl-linear``: vLLM with mxrl's linear kernels (VllmEngine kernels="mxrl-linear")."""
    return capture(model_dir, plan, tokens, kernels="mxrl-linear", **opts)


def capture_mxrl(model_dir: str, plan: str = "mxfp8", tokens: Sequence[int] = (), **opts: Any) -> Dict[str, np.ndarray]:
    """The engine ``vllm-mxrl``: vLLM with mxrl's kernels throughout (VllmEngine kernels="mxrl")."""
    return capture(model_dir, plan, tokens, kernels="mxrl", **opts)


ENGINES = {"vllm": capture, "vllm-mxrl-linear": capture_mxrl_linear, "vllm-mxrl": capture_mxrl}


def register_engines() -> None:
    """Registers this package's engines with mxrl.diverge in this process (the entry points do it for installs)."""
    from mxrl import diverge

    for name, fn in ENGINES.items():
        diverge.register(name, fn)
