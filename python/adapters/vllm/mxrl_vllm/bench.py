"""Generation throughput side by side: vLLM (its own kernels, and mxrl's inside it) against mxrl's sampler.

Every sampler runs in a worker process of its own that loads its model once
(vLLM allows one live engine per process) and then answers "generate a batch"
commands; the measurements are interleaved round by round (each round measures
every sampler once, in a rotated order), so that drift of the machine spreads
over all of them alike. Each sampler first runs every batch size once, untimed
(first calls pay one-off costs). Decoding is greedy, exactly ``new_tokens`` new
tokens per sample (no early stop); every call's prompts are fresh random token
ids (no prefix cache of either sampler can reuse an earlier call's prompt), and
every worker computes on the same number of threads (``threads``).

Per round and (sampler, batch) there are two calls, back to back: ``new_tokens``
new tokens (time t_N), then 1 new token (time t_1). Three figures come of them,
each reported as the median over rounds with the min and max:

- ``tok_s`` (generate): batch * new_tokens / t_N, prefill included;
- ``prefill_tok_s``: batch * prompt_len / t_1 (the prompt's forward pass and one
  sampled token);
- ``decode_tok_s``: batch * (new_tokens - 1) / (t_N - t_1), the tokens after the
  first per second (needs new_tokens >= 2; a round whose t_N <= t_1 counts as None).

Samplers (``SAMPLERS``), each under a plan (bf16 or mxfp8):

- ``vllm``: vLLM's own kernels; MXFP8 means the plugin's kernel on the MXFP8
  compressed-tensors export (dense only: vLLM's CPU build runs MXFP8 experts only
  through Triton);
- ``vllm-mxrl-linear`` / ``vllm-mxrl``: vLLM with mxrl's linear kernels / every mxrl
  kernel (``mxrl_vllm.kernels``);
- ``mxrl``: mxrl's own sampler (``mxrl.Sampler``, its default kernels).

Worker environment (``worker_env``): every worker gets OMP_NUM_THREADS=threads
before it imports torch, so vLLM (torch's OpenMP pool) and mxrl (``threads=``)
compute on the same number of threads whatever the caller's environment says.
(vLLM's in-process engine logs "Reducing Torch threads from 2 to 1 for serving"
when OMP_NUM_THREADS is unset, but its CPU worker skips that call: it keeps
torch's default, every core.)
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
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


def default_threads() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_env(threads: int) -> Dict[str, str]:
    """What every worker's environment is given before it imports torch, vLLM or mxrl."""
    return {"OMP_NUM_THREADS": str(threads), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def prompts_for(call: int, batch: int, prompt_len: int, vocab: int) -> List[List[int]]:
    """Fresh prompts for one call: random ids in [3, min(vocab, 4096)), seeded by the call number."""
    import random

    rng = random.Random(call)
    hi = min(vocab, 4096)
    return [[rng.randrange(3, hi) for _ in range(prompt_len)] for _ in range(batch)]


def _worker(conn, sampler: str, plan: str, model_dir: str, work: str, threads: int,
            env: Optional[Dict[str, Optional[str]]] = None) -> None:
    """Loads one sampler, then answers {"batch", "prompt_len", "new_tokens", "call"} with {"tokens", "seconds"}.

    env: set in the worker's environment before anything is imported (None values removed); default worker_env."""
    try:
        for k, v in (worker_env(threads) if env is None else env).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
        if sampler == "mxrl":
            import mxrl

            s = mxrl.Sampler(mxrl.Model.load(model_dir, plan, threads=threads))

            def gen(prompts, new):
                out = s.generate(prompts, n=1, max_new_tokens=new, temperature=0.0, seed=1, stop_tokens=[])
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
            eng = VllmEngine(path, max_model_len=512, kv_cache_bytes=1 << 30,  # batch 32 of the 0.6B shape in FP32
                             enable_prefix_caching=False, **kw)

            def gen(prompts, new):
                reqs = [{"id": i, "prompt": p, "n": 1, "max_new_tokens": new, "temperature": 0.0, "stop_tokens": [],
                         "seed": 1} for i, p in enumerate(prompts)]
                return sum(len(x["tokens"]) for x in eng.generate(reqs, full_rows=False))
        conn.send({"ready": True})
        while True:
            cmd = conn.recv()
            if cmd is None:
                break
            prompts = prompts_for(cmd.get("call", 0), cmd["batch"], cmd["prompt_len"], vocab)
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


def reset_affinity(pid: int) -> int:
    """Gives every thread of `pid` this process's CPU affinity; returns how many had another."""
    if not hasattr(os, "sched_setaffinity"):
        return 0
    want, changed = os.sched_getaffinity(0), 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if os.sched_getaffinity(int(tid)) != want:
                os.sched_setaffinity(int(tid), want)
                changed += 1
        except OSError:  # the thread ended meanwhile
            pass
    return changed


class Workers:
    """One worker process per (sampler, plan), each answering ``call(key, batch, prompt_len, new_tokens)``.

    park: every worker but the one called is stopped (SIGSTOP) while the called one
    runs, and continued (SIGCONT) before its own command is sent, so no idle worker
    can take CPU from the one being measured, whatever its threads do when idle
    (OpenMP pools spinning after a parallel region, KMP_BLOCKTIME, polling loops).
    Worker processes also get the parent's CPU affinity back at start.
    """

    def __init__(self, ctx, model_dir: str, work: str, threads: int, env: Optional[Dict[str, Optional[str]]] = None,
                 park: bool = True):
        self.ctx, self.model_dir, self.work, self.threads, self.env = ctx, model_dir, work, threads, env
        self.park = park
        self.live: Dict[tuple, Any] = {}
        self.stopped: set = set()
        self.repinned: Dict[tuple, int] = {}  # per worker: threads found pinned to other cores than the parent's
        self.calls = 0

    def _signal(self, key, stop: bool) -> None:
        if stop == (key in self.stopped):
            return
        os.kill(self.live[key][1].pid, signal.SIGSTOP if stop else signal.SIGCONT)
        (self.stopped.add if stop else self.stopped.discard)(key)

    def _run_alone(self, key) -> None:
        """Continue `key`, stop every other worker (when parking)."""
        self._signal(key, False)
        for k in self.live:
            if k != key:
                self._signal(k, self.park)

    def start(self, sampler: str, plan: str) -> Optional[str]:
        """Loads the sampler; returns why it could not, or None."""
        why = applicable(sampler, plan, self.model_dir)
        if why:
            return why
        a, b = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, daemon=True,
                                args=(b, sampler, plan, self.model_dir, self.work, self.threads, self.env))
        proc.start()
        self._run_all()  # loading runs beside no stopped worker (a stopped one would keep its memory anyway)
        msg = a.recv()
        if "error" in msg:
            proc.join()
            return msg["error"]
        self.repinned[(sampler, plan)] = reset_affinity(proc.pid)
        self.live[(sampler, plan)] = (a, proc)
        return None

    def _run_all(self) -> None:
        for k in list(self.stopped):
            self._signal(k, False)

    def pid(self, key) -> int:
        return self.live[key][1].pid

    def call(self, key, batch: int, prompt_len: int, new_tokens: int) -> float:
        """Seconds of one generate call; raises if it failed or made other than batch * new_tokens tokens."""
        a, _ = self.live[key]
        self.calls += 1
        self._run_alone(key)
        a.send({"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens, "call": self.calls})
        m = a.recv()
        if "error" in m:
            raise RuntimeError(f"{key[0]} {key[1]} batch {batch}: {m['error']}")
        if m["tokens"] != batch * new_tokens:
            raise RuntimeError(f"{key[0]} {key[1]} batch {batch}: {m['tokens']} tokens, asked "
                               f"{batch} x {new_tokens}")
        return m["seconds"]

    def close(self) -> None:
        self._run_all()
        for a, proc in self.live.values():
            try:
                a.send(None)
            except OSError:
                pass
            proc.join(timeout=60)
        self.live.clear()


def _figure(runs: List[Optional[float]]) -> Dict[str, Any]:
    """Median, min and max of a figure's rounds; runs keeps one entry per round (None: not measurable)."""
    v = [x for x in runs if x is not None]
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": runs} if v else \
        {"median": None, "min": None, "max": None, "runs": runs}


def _measure(ctx, shape, model_dir, p, samplers, batches, rounds, prompt_len, new_tokens, wd, threads, park,
             progress):
    """Workers for every sampler under plan p, a warm-up, then `rounds` interleaved rounds over (sampler, batch)."""
    w, skipped = Workers(ctx, model_dir, str(wd), threads, park=park), {}
    try:
        for s in samplers:
            why = w.start(s, p)
            if why:
                skipped[f"{s} {p}"] = why
            else:
                progress(f"bench: {shape}: {s} {p} loaded")
        keys = [(k, b) for k in w.live for b in batches]
        for k, b in keys:  # warm-up, untimed: a sampler's first call of a batch size pays one-off costs
            w.call(k, b, prompt_len, min(new_tokens, 4))
        t_n: Dict[tuple, List[float]] = {}
        t_1: Dict[tuple, List[float]] = {}
        for r in range(rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)] if keys else []
            for k, b in order:
                t_n.setdefault((k[0], b), []).append(w.call(k, b, prompt_len, new_tokens))
                t_1.setdefault((k[0], b), []).append(w.call(k, b, prompt_len, 1))
            progress(f"bench: {shape} {p}: round {r + 1}/{rounds} done")
    finally:
        w.close()
    rows = []
    for (s, b), tn in t_n.items():
        t1 = t_1[(s, b)]
        gen = [b * new_tokens / t for t in tn]
        pre = [b * prompt_len / t for t in t1]
        dec = [b * (new_tokens - 1) / (x - y) if new_tokens > 1 and x > y else None for x, y in zip(tn, t1)]
        g, pf, d = _figure(gen), _figure(pre), _figure(dec)
        rows.append({"sampler": s, "plan": p, "batch": b, "tokens": b * new_tokens, "prompt_tokens": b * prompt_len,
                     "threads_repinned": w.repinned.get((s, p), 0),
                     "tok_s": g["median"], "min": g["min"], "max": g["max"], "runs": gen,
                     "prefill_tok_s": pf["median"], "prefill": pf, "decode_tok_s": d["median"], "decode": d,
                     "seconds_new_tokens": tn, "seconds_1_token": t1})
    return rows, skipped


def run(shapes: List[str], out: str, *, samplers=SAMPLERS, plans=("bf16", "mxfp8"), batches=(1, 32),
        rounds: int = 3, prompt_len: int = 16, new_tokens: int = 32, threads: int = 0, park: bool = True,
        work: Optional[str] = None, progress: Callable[[str], None] = print) -> Dict[str, Any]:
    """Per shape and plan: a worker per sampler, then `rounds` interleaved rounds over (sampler, batch)."""
    from .experiment import write_json

    if rounds < 1 or prompt_len < 1 or new_tokens < 1 or any(b < 1 for b in batches):
        raise ValueError("rounds, prompt_len, new_tokens and every batch must be >= 1")
    for s in samplers:
        if s not in SAMPLERS:
            raise ValueError(f"unknown sampler {s!r}: {', '.join(SAMPLERS)}")
    threads = threads or default_threads()
    wd = Path(work or os.environ.get("TMPDIR", "/tmp")) / "mxrl-engine-bench"
    wd.mkdir(parents=True, exist_ok=True)
    models = make_models(wd, list(shapes))
    ctx = mp.get_context("spawn")
    res: Dict[str, Any] = {"config": {"rounds": rounds, "prompt_len": prompt_len, "new_tokens": new_tokens,
                                      "batches": list(batches), "plans": list(plans), "samplers": list(samplers),
                                      "threads": threads, "greedy": True, "worker_env": worker_env(threads),
                                      "park": park},
                           "shapes": {}}
    for shape, model_dir in models.items():
        rows, skipped = [], {}
        for p in plans:  # one plan's samplers alive at a time (a 0.6B model per worker adds up)
            try:
                r, sk = _measure(ctx, shape, model_dir, p, samplers, batches, rounds, prompt_len, new_tokens, wd,
                                 threads, park, progress)
            except (RuntimeError, OSError, EOFError) as e:  # one plan failing loses neither the others nor the file
                progress(f"bench: {shape} {p}: failed: {e}")
                skipped[f"all {p}"] = f"failed: {e}"
                continue
            rows += r
            skipped.update(sk)
        res["shapes"][shape] = {"rows": rows, "skipped": skipped}
    write_json(out, res)
    return res


def _cell(f: Dict[str, Any]) -> str:
    return "-" if f["median"] is None else f"{f['median']:.1f} [{f['min']:.1f}, {f['max']:.1f}]"


def _ratio_cell(num: List[float], den: List[float]) -> str:
    """Median [min, max] of the per-round ratios num / den (the rounds both measured)."""
    r = [a / b for a, b in zip(num, den) if a is not None and b]
    return "-" if not r else f"{statistics.median(r):.2f}x [{min(r):.2f}, {max(r):.2f}]"


FIGURES = (("tok_s", "generate"), ("prefill", "prefill"), ("decode", "decode"))


def _runs(row: Dict[str, Any], fig: str) -> List[float]:
    return row["runs"] if fig == "tok_s" else row[fig]["runs"]


def markdown(res: Dict[str, Any], stamp: str = "") -> str:
    c = res["config"]
    lines = [f"Tokens per second, median of {c['rounds']} interleaved rounds [min, max]; {c['prompt_len']}-token "
             f"prompts, {c['new_tokens']} greedy new tokens each, {c.get('threads', '?')} threads per sampler. "
             f"generate: batch x new tokens / time of the call (prefill included); prefill: batch x prompt tokens / "
             f"time of a 1-new-token call; decode: batch x (new tokens - 1) / (generate time - 1-token time). "
             f"Ratios: the median [min, max] of the per-round ratios. {stamp}".rstrip(), ""]
    for shape, r in res["shapes"].items():
        rows = r["rows"]
        lines += [f"**{shape}**", "", "| sampler | plan | batch | generate | prefill | decode | generate vs mxrl |",
                  "|---|---|---|---:|---:|---:|---:|"]
        mx = {(x["plan"], x["batch"]): x for x in rows if x["sampler"] == "mxrl"}
        for x in sorted(rows, key=lambda x: (x["plan"], x["batch"], SAMPLERS.index(x["sampler"]))):
            b = mx.get((x["plan"], x["batch"]))
            lines.append(f"| `{x['sampler']}` | {x['plan']} | {x['batch']} | "
                         f"{_cell(dict(median=x['tok_s'], min=x['min'], max=x['max']))} | {_cell(x['prefill'])} | "
                         f"{_cell(x['decode'])} | {_ratio_cell(x['runs'], b['runs']) if b else '-'} |")
        for other in [s for s in SAMPLERS if s != "mxrl" and any(x["sampler"] == s for x in rows)]:
            pairs = [(x, mx[(x["plan"], x["batch"])]) for x in rows
                     if x["sampler"] == other and (x["plan"], x["batch"]) in mx]
            if not pairs:
                continue
            lines += ["", f"mxrl's sampler against `{other}` (mxrl / {other}):", "",
                      f"| plan | batch | figure | `{other}` | `mxrl` | mxrl / {other} |", "|---|---|---|---:|---:|---:|"]
            for x, m in sorted(pairs, key=lambda t: (t[0]["plan"], t[0]["batch"])):
                for fig, name in FIGURES:
                    fx = dict(median=x["tok_s"], min=x["min"], max=x["max"]) if fig == "tok_s" else x[fig]
                    fm = dict(median=m["tok_s"], min=m["min"], max=m["max"]) if fig == "tok_s" else m[fig]
                    ratio = _ratio_cell(_runs(m, fig), _runs(x, fig))
                    lines.append(f"| {x['plan']} | {x['batch']} | {name} | {_cell(fx)} | {_cell(fm)} | {ratio} |")
        for k, why in r["skipped"].items():
            lines.append(f"\n`{k}`: not run: {why}")
        lines.append("")
    return "\n".join(lines)
