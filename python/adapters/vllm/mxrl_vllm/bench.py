"""Generation throughput side by side: vLLM (its own kernels, and mxrl's inside it) against mxrl's sampler.

Every sampler runs in a worker process of its own that loads its model once
(vLLM allows one live engine per process) and then answers "generate a batch"
commands; the measurements are interleaved round by round (each round measures
every sampler once, in a rotated order), so that drift of the machine spreads
over all of them alike. A figure is generated tokens per second of wall time for
one ``generate`` call of ``batch`` prompts of ``prompt_len`` tokens, one sample
each, exactly ``new_tokens`` new tokens per sample (no early stop), prefill
included; the median over rounds is reported with the min and max. Each sampler
first runs every batch size once, untimed (first calls pay one-off costs).

Samplers (``SAMPLERS``), each under a plan (bf16 or mxfp8):

- ``vllm``: vLLM's own kernels; MXFP8 means the plugin's kernel on the MXFP8
  compressed-tensors export (dense only: vLLM's CPU build runs MXFP8 experts only
  through Triton);
- ``vllm-mxrl-linear`` / ``vllm-mxrl``: vLLM with mxrl's linear kernels / every mxrl
  kernel (``mxrl_vllm.kernels``);
- ``mxrl``: mxrl's own sampler (``mxrl.Sampler``).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .experiment import mxfp8_export, run_cli

SAMPLERS = ("vllm", "vllm-mxrl-linear", "vllm-mxrl", "mxrl")

# Qwen3-0.6B's shape (config.json fields), for `mxrl init --config` with random weights.
QWEN3_06B = dict(model_type="qwen3", hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=151936,
                 max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)


def make_models(work: Path, shapes: List[str]) -> Dict[str, str]:
    """Random-weight checkpoints (BF16 on disk) of the shapes: tiny-dense, tiny-moe, qwen3-0.6b."""
    out = {}
    for s in shapes:
        d = work / s
        if not (d / "config.json").exists():
            if s == "qwen3-0.6b":
                toml = work / "qwen3-0.6b.toml"
                toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in QWEN3_06B.items()))
                args = ["--config", str(toml)]
            elif s in ("tiny-dense", "tiny-moe"):
                args = ["--preset", s]
            else:
                raise ValueError(f"unknown shape {s!r}: tiny-dense, tiny-moe or qwen3-0.6b")
            run_cli("init", *args, "--out", str(d), "--dtype", "bf16")
            if s == "qwen3-0.6b":  # init writes the character tokenizer, which cannot decode Qwen3's 151936 ids
                (d / "tokenizer.json").unlink(missing_ok=True)
        out[s] = str(d)
    return out


def _worker(conn, sampler: str, plan: str, model_dir: str, work: str) -> None:
    """Loads one sampler, then answers {"batch", "prompt_len", "new_tokens"} with {"tokens", "seconds"}."""
    try:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if sampler == "mxrl":
            import mxrl

            s = mxrl.Sampler(mxrl.Model.load(model_dir, plan))

            def gen(prompts, new):
                out = s.generate(prompts, n=1, max_new_tokens=new, seed=1, stop_tokens=[])
                return sum(len(g["tokens"]) for got in out for g in got)
        else:
            from .engine import VllmEngine
            from .rl import stage_checkpoint

            kw: Dict[str, Any] = {}
            if sampler == "vllm" and plan == "mxfp8":
                path = mxfp8_export(model_dir, Path(work) / (Path(model_dir).name + "-mxfp8"))
            else:
                path = stage_checkpoint(model_dir, Path(work) / (Path(model_dir).name + "-staged"))
                if sampler != "vllm":
                    kw.update(kernels=sampler[len("vllm-"):], plan=plan)
            eng = VllmEngine(path, max_model_len=512, kv_cache_bytes=1 << 30, **kw)  # batch 32 of the 0.6B shape in FP32

            def gen(prompts, new):
                reqs = [{"id": i, "prompt": p, "n": 1, "max_new_tokens": new, "temperature": 1.0, "stop_tokens": [],
                         "seed": 1} for i, p in enumerate(prompts)]
                return sum(len(x["tokens"]) for x in eng.generate(reqs, full_rows=False))
        conn.send({"ready": True})
        while True:
            cmd = conn.recv()
            if cmd is None:
                break
            prompts = [[(7 * i + j) % 50 + 3 for j in range(cmd["prompt_len"])] for i in range(cmd["batch"])]
            t0 = time.perf_counter()
            n = gen(prompts, cmd["new_tokens"])
            conn.send({"tokens": n, "seconds": time.perf_counter() - t0})
    except Exception as e:  # reported to the parent as one line
        conn.send({"error": f"{type(e).__name__}: {e}".splitlines()[0]})


def applicable(sampler: str, plan: str, model_dir: str) -> Optional[str]:
    """Why a (sampler, plan) cannot run on a model, or None."""
    c = json.loads((Path(model_dir) / "config.json").read_text())
    if sampler == "vllm" and plan == "mxfp8" and c.get("num_experts"):
        return "vLLM's CPU build runs MXFP8 experts only through Triton"
    return None


def _measure(ctx, shape, model_dir, p, samplers, batches, rounds, prompt_len, new_tokens, wd, progress):
    """Workers for every sampler under plan p, a warm-up, then `rounds` interleaved rounds over (sampler, batch)."""
    workers, skipped = {}, {}
    try:
        for s in samplers:
            why = applicable(s, p, model_dir)
            if why:
                skipped[f"{s} {p}"] = why
                continue
            a, b = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(b, s, p, model_dir, str(wd)), daemon=True)
            proc.start()
            msg = a.recv()
            if "error" in msg:
                skipped[f"{s} {p}"] = msg["error"]
                proc.join()
                continue
            workers[(s, p)] = (a, proc)
            progress(f"bench: {shape}: {s} {p} loaded")
        keys = [(w, b) for w in workers for b in batches]
        for (s, _), b in keys:  # warm-up, untimed: a sampler's first call of a batch size pays one-off costs
            a, _ = workers[(s, p)]
            a.send({"batch": b, "prompt_len": prompt_len, "new_tokens": min(new_tokens, 4)})
            if "error" in (m := a.recv()):
                raise RuntimeError(f"{shape} {s} {p} batch {b}: {m['error']}")
        times: Dict[str, List[float]] = {}
        for r in range(rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)] if keys else []
            for (s, _), b in order:
                a, _ = workers[(s, p)]
                a.send({"batch": b, "prompt_len": prompt_len, "new_tokens": new_tokens})
                m = a.recv()
                if "error" in m:
                    raise RuntimeError(f"{shape} {s} {p} batch {b}: {m['error']}")
                times.setdefault(f"{s}|{b}", []).append(m["tokens"] / m["seconds"])
            progress(f"bench: {shape} {p}: round {r + 1}/{rounds} done")
    finally:
        for a, proc in workers.values():
            a.send(None)
            proc.join(timeout=60)
    rows = []
    for k, v in times.items():
        s, b = k.split("|")
        rows.append({"sampler": s, "plan": p, "batch": int(b), "tok_s": statistics.median(v), "min": min(v),
                     "max": max(v), "runs": v})
    return rows, skipped


def run(shapes: List[str], out: str, *, samplers=SAMPLERS, plans=("bf16", "mxfp8"), batches=(1, 32),
        rounds: int = 3, prompt_len: int = 16, new_tokens: int = 32, work: Optional[str] = None,
        progress: Callable[[str], None] = print) -> Dict[str, Any]:
    """Per shape and plan: a worker per sampler, then `rounds` interleaved rounds over (sampler, batch)."""
    from .experiment import write_json

    if rounds < 1 or prompt_len < 1 or new_tokens < 1 or any(b < 1 for b in batches):
        raise ValueError("rounds, prompt_len, new_tokens and every batch must be >= 1")
    for s in samplers:
        if s not in SAMPLERS:
            raise ValueError(f"unknown sampler {s!r}: {', '.join(SAMPLERS)}")
    wd = Path(work or os.environ.get("TMPDIR", "/tmp")) / "mxrl-engine-bench"
    wd.mkdir(parents=True, exist_ok=True)
    models = make_models(wd, list(shapes))
    ctx = mp.get_context("spawn")
    res: Dict[str, Any] = {"config": {"rounds": rounds, "prompt_len": prompt_len, "new_tokens": new_tokens,
                                      "batches": list(batches), "plans": list(plans), "samplers": list(samplers)},
                           "shapes": {}}
    for shape, model_dir in models.items():
        rows, skipped = [], {}
        for p in plans:  # one plan's samplers alive at a time (a 0.6B model per worker adds up)
            try:
                r, sk = _measure(ctx, shape, model_dir, p, samplers, batches, rounds, prompt_len, new_tokens, wd,
                                 progress)
            except (RuntimeError, OSError, EOFError) as e:  # one plan failing loses neither the others nor the file
                progress(f"bench: {shape} {p}: failed: {e}")
                skipped[f"all {p}"] = f"failed: {e}"
                continue
            rows += r
            skipped.update(sk)
        res["shapes"][shape] = {"rows": rows, "skipped": skipped}
    write_json(out, res)
    return res


def markdown(res: Dict[str, Any], stamp: str = "") -> str:
    c = res["config"]
    lines = [f"Generated tokens per second (median of {c['rounds']} interleaved rounds, [min, max]); "
             f"{c['prompt_len']}-token prompts, {c['new_tokens']} new tokens each, prefill included; "
             f"ratio: against mxrl's sampler under the same plan and batch in the same run. {stamp}".rstrip(), ""]
    for shape, r in res["shapes"].items():
        lines += [f"**{shape}**", "", "| sampler | plan | batch | tokens/s [min, max] | vs mxrl's sampler |",
                  "|---|---|---|---|---|"]
        base = {(x["plan"], x["batch"]): x["tok_s"] for x in r["rows"] if x["sampler"] == "mxrl"}
        for x in sorted(r["rows"], key=lambda x: (x["plan"], x["batch"], SAMPLERS.index(x["sampler"]))):
            b = base.get((x["plan"], x["batch"]))
            ratio = f"{x['tok_s'] / b:.2f}x" if b else "-"
            lines.append(f"| `{x['sampler']}` | {x['plan']} | {x['batch']} | {x['tok_s']:.1f} "
                         f"[{x['min']:.1f}, {x['max']:.1f}] | {ratio} |")
        for k, why in r["skipped"].items():
            lines.append(f"\n`{k}`: not run: {why}")
        lines.append("")
    return "\n".join(lines)
