"""GRPO with mxrl's C++ learner and vLLM generating, every sync checked on the engine.

The shape: this process drives mxrl's own GRPO run (``mxrl.rl``: the learner,
the task, rewards, the optimizer, evaluation and checkpoints are mxrl's C++
code, bit for bit the ``mxrl rl`` path) with a *remote* sampler, this
module's ``VllmRemote``: mxrl hands it each step's rollout requests and each
weight version as a sync bundle; it generates with the in-process vLLM engine
and refits it, then runs the seven checks on what the engine computes with
and hands back the report, which mxrl treats as its own (``--checks stop``
ends the run on a failure). vLLM lives in Python and its CPU engine runs in
process, so one process with both halves is the shape with the least
machinery; the metrics, evaluation and checkpoint code are the C++ run's own.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import mxrl

from . import bundle as bundle_mod
from . import checks as checks_mod
from .engine import VllmEngine
from .faults import BY_NAME as VLLM_FAULTS
from .faults import FaultHooks


class VllmRemote:
    """mxrl.rl's remote sampler protocol over a VllmEngine."""

    def __init__(self, engine: VllmEngine) -> None:
        self.engine = engine
        self.expected: Optional[bundle_mod.Expected] = None  # the version the engine should serve
        self.last_rollout: List[dict] = []
        self.last_rollout_version: Optional[int] = None

    def generate(self, step: int, requests: List[dict]) -> List[dict]:
        samples = self.engine.generate(requests, full_rows=True)  # timed by mxrl (generate_s)
        self.last_rollout, self.last_rollout_version = samples, step
        return samples

    def sync(self, version: int, bundle: bytes, reference: Dict[str, Any]) -> Dict[str, Any]:
        # What the learner expects the engine to hold: its bundle as built with no fault injected
        # (a learner-side fault edits only what travels).
        want = reference.get("expected_bundle") or bundle
        exp = bundle_mod.parse(want)
        sent = exp if want == bundle else None  # no learner fault: what travelled is what is expected, parsed once
        t0 = time.perf_counter()
        applied, error = True, ""
        try:
            self.engine.apply(bundle, version, parsed=sent)
        except Exception as e:  # noqa: BLE001 - a refused or failed refit is the report's, not a crash
            applied, error = False, f"{type(e).__name__}: {e}"
        t1 = time.perf_counter()
        checks: List[dict] = []
        if reference.get("checks", "stop") != "off":
            if applied:
                checks = checks_mod.run(self.engine, exp, self.expected, reference, version=version,
                                        rollout=self.last_rollout, rollout_version=self.last_rollout_version)
            elif self.expected is not None:  # the previous version must still be served whole
                checks = checks_mod.run(self.engine, self.expected, None, {"agreement": False},
                                        version=self.expected.version, sync_failed=True,
                                        rollout=self.last_rollout, rollout_version=self.last_rollout_version)
        if applied:
            self.expected = exp
        return {"applied": applied, "error": error, "apply_seconds": t1 - t0,
                "check_seconds": time.perf_counter() - t1, "checks": checks}


def split_faults(inject: List[str]) -> (List[str], List[str]):
    """(faults at vLLM's seams, faults mxrl's learner injects itself)."""
    ours = [s for s in inject if s.partition("@")[0] in VLLM_FAULTS]
    return ours, [s for s in inject if s not in ours]


def make_engine(engine_model: str, seed: int, inject: List[str], repairs: bool = True, **kw) -> VllmEngine:
    from .engine import Layout

    layout = Layout.read(engine_model)
    holder: Dict[str, VllmEngine] = {}

    def previous_weights():
        e = holder.get("e")
        if e is None or e.last_bundle is None:
            return None
        return bundle_mod.to_torch(bundle_mod.parse(e.last_bundle), mx_engine=layout.mx)

    hooks = FaultHooks(inject, layout, previous_weights) if inject else None
    e = VllmEngine(engine_model, seed=seed, hooks=hooks, repairs=repairs, **kw)
    holder["e"] = e
    return e


def stage_checkpoint(model_dir: str, dst: Optional[Path] = None) -> str:
    """A folder vLLM loads as the engine's starting weights: the checkpoint's config.json and
    model.safetensors only (an mxrl training state also holds the optimizer's tensors, which vLLM
    would take for weights). The first sync overwrites every weight, so any checkpoint of the
    model's shape serves. dst: the folder to stage into (made once and reused; default a new
    temporary folder)."""
    src = Path(model_dir)
    for f in ("config.json", "model.safetensors"):
        if not (src / f).is_file():
            raise ValueError(f"{model_dir}: no {f} (pass --engine-model: a checkpoint or MXFP8 export vLLM loads)")
    if dst is not None and (dst / "config.json").is_file():
        return str(dst)
    if dst is None:
        dst = Path(tempfile.mkdtemp(prefix="mxrl-vllm-engine-"))
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "config.json", dst / "config.json")
    os.symlink((src / "model.safetensors").resolve(), dst / "model.safetensors")
    return str(dst)


def run(model_dir: str, out_dir: str, config: Optional[Dict[str, Any]] = None, *, engine_model: Optional[str] = None,
        metrics: Optional[str] = None, repairs: bool = True, log=sys.stderr, log_every: int = 10,
        engine: Optional[VllmEngine] = None, engine_kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """One GRPO run: mxrl's learner on `model_dir`, vLLM (loaded from `engine_model`, default
    `model_dir`) sampling. config: mxrl.rl settings (RlConfig fields); its "inject" may name
    faults of the vLLM path (mxrl_vllm.faults) beside the learner's own. Writes `metrics`
    (JSONL: one object per step, sync and evaluation, as `mxrl rl --metrics`) and the
    run's states under `out_dir`. Returns {"evals", "steps", "seconds", "check_seconds"}."""
    cfg = dict(config or {})
    ours, native = split_faults(list(cfg.get("inject", [])))
    cfg["inject"] = native
    own = engine is None
    if engine is None:
        if engine_model is None:
            engine_model = stage_checkpoint(model_dir)
            if (engine_kwargs or {}).get("kernels", "vllm") != "mxrl":  # kernels="mxrl" is an FP32 engine
                engine_kwargs = {"dtype": "bfloat16", **(engine_kwargs or {})}
        engine = make_engine(engine_model, int(cfg.get("seed", 0)), ours, repairs=repairs,
                             **(engine_kwargs or {}))
    elif ours:
        raise ValueError("faults of the vLLM path need run() to build the engine (pass engine=None)")
    remote = VllmRemote(engine)
    sink = open(metrics, "w") if metrics else None
    t0 = time.perf_counter()
    check_s: List[float] = []

    def write(obj):
        if sink:
            sink.write(json.dumps(obj) + "\n")
            sink.flush()

    def on_sync(rep):
        check_s.append(float(rep.get("checks_s", 0.0)))

    def on_step(st):
        st = dict(st)
        st["engine"] = "vllm"
        write(st)
        mm = st.get("mismatch") or {}
        sy = st.get("sync") or {}
        ran = list((sy.get("checks") or {}).values())  # the report's checks: those that ran
        ok = sum(1 for c in ran if c.get("passed"))
        if st["step"] % log_every == 0 or st["step"] == steps:
            print(f"step {st['step']}/{steps} reward {st.get('reward_mean', 0):.3f} "
                  f"kl {mm.get('kl_mean', float('nan')):.2e} |dlogp|max {mm.get('abs_dlogp_max', float('nan')):.2e} "
                  f"checks {ok}/{len(ran)} gen {st.get('generate_s', 0):.2f}s sync {st.get('sync_s', 0):.2f}s",
                  file=log, flush=True)

    def on_eval(e):
        write(dict(e))  # the metrics line of `mxrl rl`
        print(f"eval at step {e['step']}: held-out greedy accuracy {e['eval_accuracy']:.3f} "
              f"({e['eval_correct']}/{e['eval_total']})", file=log, flush=True)

    try:
        r = mxrl.rl.start(model_dir, cfg, remote=remote)
        steps = int(r.config["steps"])
        write({"step": r.step, "engine": "vllm", "vllm_model": engine.model_dir})
        print(f"rl: vLLM sampling ({engine.model_dir}, {'MXFP8' if engine.layout.mx else 'BF16'} weights), "
              f"mxrl learner on {model_dir}, {steps} steps", file=log, flush=True)
        evals = r.run(out_dir, on_step=on_step, on_eval=on_eval, on_sync=on_sync)
    finally:
        if sink:
            sink.close()
        if own:
            engine.close()
    return {"evals": evals, "steps": steps, "seconds": time.perf_counter() - t0, "check_seconds": check_s}
