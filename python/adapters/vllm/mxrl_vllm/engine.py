"""A live vLLM engine as mxrl's sampler: generate, refit, and read what it computes with.

``VllmEngine`` wraps an in-process ``vllm.LLM`` (CPU build; token-id prompts,
no tokenizer) loaded from an mxrl checkpoint (BF16/F32) or an MXFP8
compressed-tensors export (``mxrl export --format compressed-tensors``, served
through the kernel ``mxrl_vllm.plugin`` registers).

- ``generate(requests)``: mxrl's remote-rollout protocol (``mxrl.rl``): samples
  with per-token log-probs and, when asked, the full-vocabulary rows.
- ``apply(bundle, version)``: a sync through vLLM's own refit path, the one RL
  frameworks call (the worker's ``reload_weights``, layerwise: it restores each
  layer's checkpoint-format parameters, loads, and re-runs the layer's
  post-load processing), then the repairs this adapter makes where vLLM's CPU
  build leaves a derived copy stale (``docs/vllm.md`` lists them), then a
  prefix-cache reset. All or nothing: a refit that fails part-way re-applies the
  previous bundle, and an engine that cannot be restored refuses to generate.
- ``view()``: what the engine computes with, per mxrl tensor, read where vLLM
  keeps it readable and probed through the layer's own op where it does not
  (``mxrl_vllm.checks``).

Faults reach the refit through ``RefitHooks`` (``mxrl_vllm.faults`` builds them);
the engine knows no fault by name.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from . import bundle as bundle_mod

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine lives in this process
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB


def fill_row(row: np.ndarray, logprobs: Dict[int, Any]) -> None:
    """Writes one position's vLLM log-prob dict (token id -> Logprob) into its full-vocabulary row;
    ids beyond the row (vLLM's padded vocabulary) are dropped."""
    vocab = row.shape[0]
    for k, lp in logprobs.items():
        if k < vocab:
            row[k] = lp.logprob


class RefitHooks:
    """The seams of a refit a fault can act at (defaults: no fault)."""

    def edit_weights(self, weights: Dict[str, Any], version: int) -> Dict[str, Any]:
        """The checkpoint-format tensors handed to vLLM's loader."""
        return weights

    def interrupt_after(self, version: int) -> Optional[int]:
        """Raise after this many tensors were loaded (None: never)."""
        return None

    def skip_repairs(self, version: int) -> bool:
        """Leave vLLM's stale derived copies as vLLM leaves them."""
        return False

    def skip_prefix_reset(self, version: int) -> bool:
        return False

    def skip_rollback(self, version: int) -> bool:
        """After a failed refit, keep serving whatever the engine holds."""
        return False


class RefitInterrupted(RuntimeError):
    pass


@dataclass
class Layout:
    """The model's shapes, from its config.json (what un-fusing vLLM's tensors needs)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    experts: int = 0
    moe_intermediate: int = 0
    mx: bool = False  # an MXFP8 compressed-tensors export

    @staticmethod
    def read(model_dir: str) -> "Layout":
        path = Path(model_dir) / "config.json"
        try:
            c = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: {e}") from None
        try:
            q = c.get("quantization_config") or {}
            if q and q.get("format") != "mxfp8-quantized":
                raise ValueError(f"{path}: quantization format {q.get('format')!r}: the adapter serves BF16/F32 "
                                 "checkpoints and MXFP8 compressed-tensors exports")
            return Layout(layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                          heads=int(c["num_attention_heads"]), kv_heads=int(c["num_key_value_heads"]),
                          head_dim=int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]),
                          intermediate=int(c.get("intermediate_size", 0)), vocab=int(c["vocab_size"]),
                          tied=bool(c.get("tie_word_embeddings", False)), experts=int(c.get("num_experts", 0)),
                          moe_intermediate=int(c.get("moe_intermediate_size", 0)), mx=bool(q))
        except KeyError as e:
            raise ValueError(f"{path}: missing {e}") from None


class VllmEngine:
    def __init__(self, model_dir: str, *, seed: int = 0, max_model_len: int = 512, hooks: Optional[RefitHooks] = None,
                 repairs: bool = True, kv_cache_bytes: int = 256 << 20, kernels: str = "vllm",
                 plan: Optional[str] = None, **llm_kwargs: Any) -> None:
        """Load `model_dir` into an in-process vLLM engine.

        kernels: "vllm" (vLLM's own kernels), "mxrl-linear" (every linear through
        mxrl.ops.Linear under `plan`) or "mxrl" (also norms, rope, SiLU-and-mul,
        attention, routed experts and the sampler's log-softmax; an FP32 engine):
        see mxrl_vllm.kernels. plan: mxrl's precision plan (needed unless "vllm").

        repairs: fix the derived copies vLLM's CPU build leaves stale after a refit
        (off: observe vLLM's own behaviour, which the checks then report).
        kv_cache_bytes: the engine's KV cache (256 MiB holds about 64k positions of a tiny preset).
        llm_kwargs: passed to vllm.LLM (e.g. enable_prefix_caching=False).
        """
        from vllm import LLM

        from . import kernels as kernels_mod
        from . import plugin

        plugin.register()  # an MXFP8 export needs the kernel (the entry point does this too)
        if kernels == "mxrl":
            dt = str(llm_kwargs.get("dtype", "float32")).replace("torch.", "")
            if dt not in ("float32", "float"):
                raise ValueError(f"kernels='mxrl' computes in FP32 like the learner: dtype={dt!r} is refused")
            llm_kwargs["dtype"] = "float32"
        kernels_mod.register()
        kernels_mod.set_mode(kernels, plan)  # read by the layers vLLM constructs below
        self.kernels, self.plan = kernels, plan
        self.model_dir = str(model_dir)
        self.layout = Layout.read(self.model_dir)
        if self.layout.mx and self.layout.experts:
            raise ValueError(f"{model_dir}: an MXFP8 MoE export: vLLM's CPU build runs MXFP8 experts only through "
                             "Triton, which it lacks; serve the BF16 checkpoint (the refit sends exact BF16 values)")
        _retire_parallel_state()
        kw = dict(model=self.model_dir, skip_tokenizer_init=True, max_logprobs=-1, max_model_len=max_model_len,
                  enforce_eager=True, seed=seed, kv_cache_memory_bytes=kv_cache_bytes)
        kw.update(llm_kwargs)
        try:
            self.llm = LLM(**kw)
        except BaseException:
            kernels_mod.set_mode("vllm")
            raise
        self.hooks = hooks or RefitHooks()
        self.repairs = repairs
        self.version: Optional[int] = None  # None: the checkpoint it was loaded from
        self.broken: Optional[str] = None  # why it refuses to generate
        self.last_bundle: Optional[bytes] = None
        self.prefix_reset_version: Optional[int] = None
        self.last_refit: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        """Shut the engine down and free its memory (the KV cache above all)."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            core = getattr(llm.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
            from . import kernels as kernels_mod

            kernels_mod.set_mode("vllm")  # engines made after this one (or plain vllm.LLM) get vLLM's kernels
            import gc

            gc.collect()

    def __enter__(self) -> "VllmEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- model access
    def call(self, fn: Callable[[Any], Any]) -> Any:
        """fn(model) on the engine's model (one worker: in process)."""
        return self.llm.apply_model(fn)[0]

    def cached_prefix_blocks(self) -> int:
        """KV blocks the prefix cache holds (reusable by the next request)."""
        core = self.llm.llm_engine.engine_core.engine_core
        return len(core.scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block._cache)

    # ---------------------------------------------------------------- generation
    def generate(self, requests: List[dict], full_rows: bool = True) -> List[dict]:
        """Samples for mxrl's rollout requests (the remote protocol of mxrl.rl).

        Each sample records the version it was generated under; full_rows adds
        the full-vocabulary log-prob rows (exact KL needs them).
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.broken:
            raise RuntimeError(f"vLLM engine refuses to generate: {self.broken}")
        with self._lock:
            v = self.version if self.version is not None else 0
            # One vLLM request per sample, seeded by (seed, request, index): each sample depends on
            # nothing but those and the weights, as mxrl's own sampler's do, whatever else is in
            # the batch. The prompt's KV is computed once and shared through the prefix cache.
            prompts, params, owners = [], [], []
            for r in requests:
                for i in range(int(r["n"])):
                    prompts.append(TokensPrompt(prompt_token_ids=list(r["prompt"])))
                    seed = (int(r["seed"]) * 1_000_003 + int(r["id"]) * 4099 + i) % (1 << 63)
                    params.append(SamplingParams(max_tokens=int(r["max_new_tokens"]),
                                                 temperature=float(r["temperature"]),
                                                 stop_token_ids=list(r["stop_tokens"]), seed=seed,
                                                 logprobs=-1 if full_rows else 0, detokenize=False,
                                                 skip_special_tokens=False, ignore_eos=True))
                    owners.append((r, i))
            outs = self.llm.generate(prompts, params, use_tqdm=False)
            vocab = self.layout.vocab
            samples = []
            for (r, i), o in zip(owners, outs):
                for c in o.outputs:
                    toks = list(c.token_ids)
                    # Only when asked: at Qwen3's 151,936 ids a batch of 32 x 32 tokens is 0.6 GB to fill.
                    rows = np.full((len(toks), vocab), -np.inf, dtype=np.float32) if full_rows else None
                    lps = []
                    for t, (tok, d) in enumerate(zip(toks, c.logprobs or [])):
                        lps.append(float(d[tok].logprob))
                        if full_rows:
                            fill_row(rows[t], d)
                    stopped = bool(toks) and toks[-1] in r["stop_tokens"]
                    s = {"request": int(r["id"]), "index": i, "tokens": toks, "logprobs": lps,
                         "finish": "stop" if stopped else "length", "version": v,
                         "token_versions": [v] * len(toks)}
                    if full_rows:
                        s["logits"] = rows
                    samples.append(s)
            return samples

    def prompt_logprobs(self, sequences: List[List[int]], temperature: float = 1.0) -> List[np.ndarray]:
        """Per sequence, [len - 1, vocab]: row t is the log-distribution of token t + 1 given tokens 0..t."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if self.broken:
            raise RuntimeError(f"vLLM engine refuses to score: {self.broken}")
        sp = SamplingParams(max_tokens=1, prompt_logprobs=-1, detokenize=False, temperature=0.0)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in sequences], sp, use_tqdm=False)
        vocab = self.layout.vocab
        res = []
        for s, o in zip(sequences, outs):
            rows = np.full((len(s) - 1, vocab), -np.inf, dtype=np.float32)
            for t, d in enumerate(o.prompt_logprobs[1:]):
                fill_row(rows[t], d)
            if temperature != 1.0:  # raw log-probs: rescale and renormalize
                z = rows.astype(np.float64) / temperature
                z -= z.max(axis=1, keepdims=True)
                rows = (z - np.log(np.exp(z).sum(axis=1, keepdims=True))).astype(np.float32)
            res.append(rows)
        return res

    # ---------------------------------------------------------------- refit
    def apply(self, bundle: bytes, version: int, parsed: Optional[bundle_mod.Expected] = None) -> Dict[str, Any]:
        """Sync weight `version` from an mxrl bundle: refit, repairs, prefix-cache reset; all or nothing.

        parsed: bundle_mod.parse(bundle), when the caller has it already.
        Returns {"seconds", "tensors", "repairs": [...]}; raises (the engine
        serving the previous version whole, or refusing) when the refit fails.
        """
        t0 = time.perf_counter()
        exp = parsed if parsed is not None else bundle_mod.parse(bundle)
        if exp.version != version:
            raise ValueError(f"bundle holds version {exp.version}, the sync is of version {version}")
        with self._lock:
            try:
                info = self._refit(exp, version)
            except Exception as err:
                self._rollback(version, err)
                raise
            self.version = version
            self.last_bundle = bytes(bundle)
            info["seconds"] = time.perf_counter() - t0
            self.last_refit = info
            return info

    def _refit(self, exp: bundle_mod.Expected, version: int) -> Dict[str, Any]:
        weights = bundle_mod.to_torch(exp, mx_engine=self.layout.mx)
        if self.layout.tied:
            weights.pop("lm_head.weight", None)  # tied: vLLM's checkpoint format has no head of its own
        weights = self.hooks.edit_weights(weights, version)
        stop_at = self.hooks.interrupt_after(version)

        def stream():
            for i, item in enumerate(weights.items()):
                if stop_at is not None and i == stop_at:
                    raise RefitInterrupted(f"refit of version {version} interrupted after {i} of "
                                           f"{len(weights)} tensors")
                yield item

        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream()})
        written = {n.rsplit(".mlp.experts.", 1)[0] for n in weights if ".mlp.experts." in n}
        repairs = [] if self.hooks.skip_repairs(version) or not self.repairs else \
            self.call(lambda model: _repair_derived(model, written))
        if not self.hooks.skip_prefix_reset(version):
            if not self.llm.reset_prefix_cache():
                raise RuntimeError("vLLM refused to reset its prefix cache (requests still running)")
            self.prefix_reset_version = version
        return {"tensors": len(weights), "repairs": repairs}

    def _rollback(self, version: int, err: Exception) -> None:
        if self.hooks.skip_rollback(version):
            return
        if self.last_bundle is None:
            self.broken = f"the refit of version {version} failed ({err}) and no earlier bundle can restore it"
            return
        try:
            prev = bundle_mod.parse(self.last_bundle)
            saved = self.hooks
            self.hooks = RefitHooks()
            try:
                self._refit(prev, prev.version)
            finally:
                self.hooks = saved
        except Exception as again:  # noqa: BLE001 - any failure leaves the engine unusable
            self.broken = f"the refit of version {version} failed ({err}); restoring version {self.version} " \
                          f"failed too ({again})"


def _retire_parallel_state() -> None:
    """Drop the model-parallel groups an earlier engine in this process made.

    vLLM keeps them per process and builds them for the first model only: an
    engine on a dense model leaves no expert-parallel group, and a later MoE
    engine then fails to load ("expert parallel group is not initialized").
    So one engine per process is live at a time: making a new one retires the
    groups, and an older engine must not be used after that.
    """
    from vllm.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


def _repair_derived(model: Any, expert_layers: set) -> List[str]:
    """Rebuild the derived copies vLLM's CPU refit leaves stale; returns what was rebuilt.

    - A tied head: the refit writes the embedding, but the head's packed GEMM copy
      (``cpu_linear``) was packed from the old values at load and is never rebuilt
      (the head receives no tensor of its own).
    - Routed experts: on a weight update vLLM copies the new values, in checkpoint
      layout, into the storage its fused op reads as pre-packed, and does not
      re-pack. Only the layers `expert_layers` ("model.layers.L") whose experts
      this refit wrote are re-packed: re-packing storage that already holds a
      pre-pack scrambles it.
    """
    done = []
    lm_head = getattr(model, "lm_head", None)
    embed = model.model.embed_tokens
    if lm_head is not None and getattr(lm_head, "weight", None) is embed.weight:
        lm_head.quant_method.process_weights_after_loading(lm_head)
        done.append("lm_head: re-packed from model.embed_tokens.weight (tied)")
    for name, m in model.named_modules():
        qm = getattr(m, "quant_method", None)
        kernel = getattr(qm, "moe_kernel", None)
        if kernel is not None and hasattr(kernel, "fused_experts") and name.split(".mlp.")[0] in expert_layers:
            kernel.fused_experts.process_weights_after_loading(m)
            done.append(f"{name}: experts re-packed")
    return done
