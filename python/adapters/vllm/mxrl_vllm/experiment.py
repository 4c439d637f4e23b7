"""The report's "real engine" part: what matching buys when the sampler is a live vLLM engine.

For each sampler configuration, on each model (the tiny dense and MoE SFT warm
starts) and seed, the experiment does what ``mxrl experiment matching`` does with
mxrl's own sampler, and measures with the same C++ (``mxrl.stats``):

1. the sampler gets the learner's weights under the configuration's plan through a
   real sync (``VllmEngine.apply`` of the bundle ``mxrl.sync.export`` writes), and
   the seven checks run on the engine (a configuration whose sync fails a check is
   reported as such, not measured);
2. it samples ``samples`` completions of each of ``prompts`` held-out prompts of the
   task (``mxrl.tasks.problems``, eval split, the seed's) at temperature 1, with full
   log-prob rows;
3. the learner (``mxrl.Model`` under its recipe) scores the same tokens; per
   generated token, the exact KL(sampler || learner) from the two full rows
   (``mxrl.stats.match_sums``), summed per prompt.

Per configuration: the mean KL per token over every seed's tokens with a 95%
bootstrap CI over prompts (``mxrl.stats.bootstrap_mean``), the per-seed means, and
the paper's ratios by a paired bootstrap over the same prompts
(``mxrl.stats.bootstrap_ratio``).

The configurations (``CONFIGS``), learner recipe mxfp8 unless said:

- ``vllm-bf16``: vLLM's own kernels, the learner's BF16 compute copy (a BF16 sampler);
- ``vllm-mxfp8``: vLLM's own kernels with every linear on the learner's grid: for the
  dense model the MXFP8 compressed-tensors export served by the plugin's kernel
  (vLLM's emulation: MX weights, BF16 activations); vLLM's CPU build runs MXFP8
  experts only through Triton, so the MoE model gets the same on-grid values as BF16;
- ``vllm-mxfp8-half``: the same with only the even layers' linears on grid (mxfp8-half);
- ``vllm-mxrl-linear``: every linear through mxrl's kernels (``mxrl_vllm.kernels``);
- ``vllm-mxrl``: every op mxrl's kernels could replace;
- ``mxrl``: mxrl's own sampler on the learner's grid;
- ``vllm-bf16-e2e``: vLLM's own kernels, BF16, against a BF16 learner (BF16 end to end).

vLLM engines live one at a time in this process; ``run`` starts one per
(configuration, seed) and closes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import mxrl

CONFIGS: Dict[str, Dict[str, Any]] = {
    "vllm-bf16": {"engine": "vllm", "kernels": "vllm", "plan": "bf16", "learner": "mxfp8",
                  "what": "vLLM's kernels, BF16 weights (the learner's compute copy)"},
    "vllm-mxfp8": {"engine": "vllm", "kernels": "vllm", "plan": "mxfp8", "learner": "mxfp8", "export": True,
                   "what": "vLLM's kernels, every linear's weights on the learner's MXFP8 grid"},
    "vllm-mxfp8-half": {"engine": "vllm", "kernels": "vllm", "plan": "mxfp8-half", "learner": "mxfp8",
                        "what": "vLLM's kernels, the even layers' linears on grid, the rest BF16"},
    "vllm-mxrl-linear": {"engine": "vllm", "kernels": "mxrl-linear", "plan": "mxfp8", "learner": "mxfp8",
                         "what": "vLLM with mxrl's linear kernels (the learner's activation quantization and GEMM)"},
    "vllm-mxrl": {"engine": "vllm", "kernels": "mxrl", "plan": "mxfp8", "learner": "mxfp8",
                  "what": "vLLM with every mxrl kernel that could be registered"},
    "mxrl": {"engine": "mxrl", "plan": "mxfp8", "learner": "mxfp8", "what": "mxrl's own sampler on the learner's grid"},
    "vllm-bf16-e2e": {"engine": "vllm", "kernels": "vllm", "plan": "bf16", "learner": "bf16",
                      "what": "BF16 end to end: vLLM BF16 against a BF16 learner"},
}

# The paper's claims and the ratio of configurations that measures each here (numerator, denominator).
CLAIMS = [
    ("half the linears on grid vs a BF16 sampler", "-11%", "vllm-mxfp8-half", "vllm-bf16", None),
    ("all linears on grid vs a BF16 sampler", "-16%", "vllm-mxfp8", "vllm-bf16", None),
    ("MoE: another grid (BF16) vs the shared grid", "2x", "vllm-bf16", "vllm-mxfp8", "moe"),
    ("MXFP8 end to end vs BF16 end to end", "2.5-10x", "vllm-mxfp8", "vllm-bf16-e2e", None),
    ("mxrl's linear kernels inside vLLM vs vLLM's emulation", "-", "vllm-mxrl-linear", "vllm-mxfp8", None),
    ("every mxrl kernel inside vLLM vs vLLM's emulation", "-", "vllm-mxrl", "vllm-mxfp8", None),
]


def run_cli(*args: str) -> None:
    """Runs the mxrl CLI ($MXRL_BIN, else the source tree's build/mxrl); its error as one line."""
    b = os.environ.get("MXRL_BIN") or str(Path(__file__).resolve().parents[4] / "build" / "mxrl")
    if not Path(b).is_file():
        raise ValueError(f"{b}: no mxrl binary (set MXRL_BIN or build it with scripts/build.sh)")
    r = subprocess.run([b, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mxrl {args[0]} failed: {r.stderr.strip()}")


def mxfp8_export(model_dir: str, out: Path, recipe: str = "mxfp8") -> str:
    """`out`: the MXFP8 compressed-tensors export of `model_dir` under `recipe` (made once, reused after)."""
    if not out.exists():
        run_cli("export", "--model", str(model_dir), "--recipe", recipe, "--format", "compressed-tensors",
                "--out", str(out))
    return str(out)


def _eos(model_dir: str) -> List[int]:
    c = json.loads((Path(model_dir) / "config.json").read_text())
    e = c.get("eos_token_id")
    if e is None:
        raise ValueError(f"{model_dir}/config.json: no eos_token_id (the experiment stops samples at EOS)")
    return [int(e[0] if isinstance(e, list) else e)]


def requests(model_dir: str, task: str, seed: int, prompts: int, samples: int) -> List[dict]:
    """The held-out probe, as mxrl's remote-rollout requests: max new tokens = longest answer + 8."""
    tk = mxrl.Tokenizer.load(str(Path(model_dir) / "tokenizer.json"))
    probs = mxrl.tasks.problems(task, "eval", seed=seed, count=prompts)
    max_new = max(len(tk.encode(a)) for _, a in probs) + 8
    eos = _eos(model_dir)
    return [{"id": i, "prompt": [int(t) for t in tk.encode(p)], "n": samples, "max_new_tokens": max_new,
             "temperature": 1.0, "stop_tokens": eos, "seed": seed} for i, (p, _) in enumerate(probs)]


def _engine_model(model_dir: str, cfg: dict, work: Path) -> str:
    """What vLLM loads: the checkpoint (weights and config only), or for an MXFP8 dense export config the export."""
    from .rl import stage_checkpoint

    layout = json.loads((Path(model_dir) / "config.json").read_text())
    if cfg.get("export") and not layout.get("num_experts"):
        return mxfp8_export(model_dir, work / f"export-{cfg['plan']}", cfg["plan"])
    return stage_checkpoint(model_dir, work / "staged")  # once per model, removed with `work`


def sample_vllm(model_dir: str, cfg: dict, reqs: List[dict], seed: int, work: Path) -> Dict[str, Any]:
    """Sync the learner's weights under cfg's plan into a fresh engine, run the checks, sample."""
    from . import bundle as bundle_mod
    from . import checks
    from .engine import VllmEngine

    kw: Dict[str, Any] = {}
    if cfg["kernels"] != "vllm":
        kw.update(kernels=cfg["kernels"], plan=cfg["plan"])
    bundle_path = work / f"bundle-{cfg['plan']}.mxsync"
    if not bundle_path.exists():
        mxrl.sync.export(model_dir, bundle_path, recipe=cfg["plan"], sync="ship", version=1)
    b = bundle_path.read_bytes()
    exp = bundle_mod.parse(b)
    with VllmEngine(_engine_model(model_dir, cfg, work), seed=seed, **kw) as eng:
        eng.apply(b, 1, parsed=exp)
        rs = checks.run(eng, exp, None, {"agreement": False}, version=1)
        failed = {r["name"]: r["findings"] for r in rs if r["ran"] and not r["passed"]}
        t0 = time.perf_counter()
        out = eng.generate(reqs, full_rows=True)
        secs = time.perf_counter() - t0
    return {"samples": out, "checks_failed": failed, "generate_s": secs, "rows": "logprobs"}


def sample_mxrl(model_dir: str, cfg: dict, reqs: List[dict], seed: int) -> Dict[str, Any]:
    """mxrl's own sampler on the plan's grid (the same weights the learner computes with)."""
    m = mxrl.Model.load(model_dir, cfg["plan"])
    s = mxrl.Sampler(m)
    t0 = time.perf_counter()
    out = []
    for r in reqs:
        (got,) = s.generate([r["prompt"]], n=r["n"], max_new_tokens=r["max_new_tokens"], temperature=r["temperature"],
                            seed=seed * 1_000_003 + r["id"], stop_tokens=r["stop_tokens"], full_rows=True)
        out += [{"request": r["id"], "tokens": list(map(int, g["tokens"])), "logits": g["logits"]} for g in got]
    return {"samples": out, "checks_failed": {}, "generate_s": time.perf_counter() - t0, "rows": "logits"}


def measure(learner: "mxrl.Model", reqs: List[dict], samples: List[dict], rows_are: str = "logits",
            temperature: float = 1.0) -> List[dict]:
    """Per prompt: the sums of mxrl.stats.match_sums over its samples' generated tokens.

    rows_are: what the sampler's rows hold. vLLM returns log-probs; the learner's rows are
    then its log-softmax too (mxrl.ops.log_softmax, the learner's own), so that two equal
    distributions give equal rows and an exact 0 (softmaxing a log-prob row again moves
    it by rounding); mxrl's sampler returns raw logits, compared with the learner's.
    """
    keys = ("tokens", "kl", "k3", "abs_dlogp", "unequal")
    per = [dict.fromkeys(keys, 0) | {"abs_dlogp_max": 0.0} for _ in reqs]
    for s in samples:
        toks = [int(t) for t in s["tokens"]]
        if not toks:
            continue
        prompt = reqs[s["request"]]["prompt"]
        rows = learner.logits(list(prompt) + toks)[len(prompt) - 1:len(prompt) - 1 + len(toks)]
        if rows_are == "logprobs":
            rows = mxrl.ops.log_softmax(np.ascontiguousarray(rows))
        got = mxrl.stats.match_sums(np.ascontiguousarray(s["logits"], dtype=np.float32), np.ascontiguousarray(rows),
                                    toks, temperature)
        p = per[s["request"]]
        for k in keys:
            p[k] += got[k]
        p["abs_dlogp_max"] = max(p["abs_dlogp_max"], got["abs_dlogp_max"])
    return per


def run(models: Dict[str, str], out: str, *, configs: Optional[List[str]] = None, task: str = "addition:digits=3",
        seeds: List[int] = (0, 1, 2), prompts: int = 128, samples: int = 4, bootstrap: int = 1000,
        progress: Callable[[str], None] = print) -> Dict[str, Any]:
    """Every configuration x model x seed; writes OUT (JSON, renamed into place) and returns it."""
    names = list(configs or CONFIGS)
    if prompts < 1 or samples < 1 or bootstrap < 1 or not seeds:
        raise ValueError(f"prompts ({prompts}), samples ({samples}) and bootstrap ({bootstrap}) must be >= 1, "
                         f"with at least one seed")
    for n in names:
        if n not in CONFIGS:
            raise ValueError(f"unknown configuration {n!r}; known: {', '.join(CONFIGS)}")
    res: Dict[str, Any] = {"config": {"task": task, "seeds": list(seeds), "prompts": prompts, "samples": samples,
                                      "bootstrap": bootstrap, "configs": {n: CONFIGS[n] for n in names}},
                           "presets": {}}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mxrl-engine-") as tmp:
        for preset, model_dir in models.items():
            work = Path(tmp) / preset
            work.mkdir()
            learners: Dict[str, Any] = {}
            rows: Dict[str, Any] = {}
            for name in names:
                cfg = CONFIGS[name]
                learner = learners.setdefault(cfg["learner"], mxrl.Model.load(model_dir, cfg["learner"]))
                per_seed, failed, gen_s = {}, {}, 0.0
                for seed in seeds:
                    reqs = requests(model_dir, task, seed, prompts, samples)
                    t0 = time.perf_counter()
                    if cfg["engine"] == "mxrl":
                        got = sample_mxrl(model_dir, cfg, reqs, seed)
                    else:
                        got = sample_vllm(model_dir, cfg, reqs, seed, work)
                    per_seed[seed] = measure(learner, reqs, got["samples"], got["rows"])
                    if got["checks_failed"]:
                        failed[seed] = got["checks_failed"]
                    gen_s += got["generate_s"]
                    tok = sum(p["tokens"] for p in per_seed[seed])
                    kl = sum(p["kl"] for p in per_seed[seed]) / max(tok, 1)
                    progress(f"engine: {preset} {name} seed {seed}: {tok} tokens, KL {kl:.3e} "
                             f"({time.perf_counter() - t0:.0f} s)")
                pooled = [p for s in seeds for p in per_seed[s]]
                m, lo, hi = mxrl.stats.bootstrap_mean([p["tokens"] for p in pooled], [p["kl"] for p in pooled],
                                                      bootstrap, 7)
                tokens = sum(p["tokens"] for p in pooled)
                rows[name] = {
                    "kl": m, "lo": lo, "hi": hi, "tokens": tokens,
                    "per_seed": {str(s): sum(p["kl"] for p in per_seed[s]) / max(1, sum(p["tokens"] for p in per_seed[s]))
                                 for s in seeds},
                    "unequal_tokens": sum(p["unequal"] for p in pooled),
                    "abs_dlogp_max": max(p["abs_dlogp_max"] for p in pooled),
                    "k3": sum(p["k3"] for p in pooled) / max(tokens, 1),
                    "generate_s": gen_s, "checks_failed": failed, "_per_prompt": pooled,
                }
            ratios = []
            for claim, paper, a, b, only in CLAIMS:
                if a not in rows or b not in rows or (only and only not in preset):
                    continue
                pa, pb = rows[a]["_per_prompt"], rows[b]["_per_prompt"]
                r, lo, hi = mxrl.stats.bootstrap_ratio([p["tokens"] for p in pa], [p["kl"] for p in pa],
                                                       [p["tokens"] for p in pb], [p["kl"] for p in pb], bootstrap, 11)
                ratios.append({"claim": claim, "paper": paper, "a": a, "b": b, "ratio": r, "lo": lo, "hi": hi})
            for r in rows.values():
                r.pop("_per_prompt")
            res["presets"][preset] = {"model": model_dir, "rows": rows, "claims": ratios}
    res["seconds"] = time.perf_counter() - t_all
    write_json(out, res)
    return res


def write_json(path: str, obj: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float) + "\n")
    os.replace(tmp, p)


def _fmt(x: float) -> str:
    return "0" if x == 0 else f"{x:.2e}"


def markdown(res: Dict[str, Any], stamp: str = "") -> str:
    """The tables: KL per configuration with CIs, and the paper's ratios."""
    c = res["config"]
    lines = [f"Exact KL(sampler || learner) per generated token, mean over {len(c['seeds'])} seeds "
             f"({c['prompts']} held-out prompts x {c['samples']} samples each, task {c['task']}), "
             f"95% bootstrap CI over prompts. {stamp}".rstrip(), ""]
    for preset, p in res["presets"].items():
        lines += [f"**{preset}**", "", "| sampler | KL / token [95% CI] | per seed | tokens differing | max abs dlogp | checks |",
                  "|---|---|---|---|---|---|"]
        for name, r in p["rows"].items():
            seeds = " / ".join(_fmt(v) for v in r["per_seed"].values())
            ci = f"{_fmt(r['kl'])} [{_fmt(r['lo'])}, {_fmt(r['hi'])}]"
            chk = "pass" if not r["checks_failed"] else "FAIL: " + "; ".join(
                f"seed {s}: {', '.join(f)}" for s, f in r["checks_failed"].items())
            lines.append(f"| `{name}` | {ci} | {seeds} | {r['unequal_tokens']} of {r['tokens']} | "
                         f"{r['abs_dlogp_max']:.2g} | {chk} |")
        lines += ["", "| claim | paper | measured: KL ratio [95% CI] |", "|---|---|---|"]
        for q in p["claims"]:
            pct = f" ({(q['ratio'] - 1) * 100:+.0f}%)" if np.isfinite(q["ratio"]) else ""
            lines.append(f"| {q['claim']} (`{q['a']}` / `{q['b']}`) | {q['paper']} | "
                         f"{q['ratio']:.3g}x [{q['lo']:.3g}, {q['hi']:.3g}]{pct} |")
        lines.append("")
    return "\n".join(lines)
