"""mxrl-vllm: vLLM as mxrl's sampler, from the command line.

  mxrl-vllm rl --model CKPT --out DIR [--engine-model DIR] [--set KEY=VALUE ...] [--inject F[@STEP] ...]
  mxrl-vllm faults --model CKPT --out DIR [--engine-model DIR] [--only F,G] [--task T]
  mxrl-vllm check --model CKPT --bundle FILE [--previous FILE] [--engine-model DIR]
  mxrl-vllm diverge CKPT --plan mxfp8 [--engine vllm ...] [--tokens 1,2,3 | --prompt-len N --seed S] --out DIR

Settings are mxrl's own RL fields (`mxrl rl --help` lists them; mxrl validates
them): --set steps=100 --set task=addition:digits=3 --set optim.lr=1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare string (task names, modes)


def settings(pairs: List[str], config: str = "") -> Dict[str, Any]:
    cfg: Dict[str, Any] = {}
    if config:
        try:
            cfg = json.loads(Path(config).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"mxrl-vllm: error: {config}: {e}")
        if not isinstance(cfg, dict):
            raise SystemExit(f"mxrl-vllm: error: {config}: expected a JSON object of RL settings")
    for p in pairs:
        key, eq, val = p.partition("=")
        if not eq or not key:
            raise SystemExit(f"mxrl-vllm: error: --set {p}: expected KEY=VALUE")
        node = cfg
        *path, last = key.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = _value(val)
    return cfg


def cmd_rl(a: argparse.Namespace) -> int:
    from .rl import run

    cfg = settings(a.set, a.config)
    if a.inject:
        cfg["inject"] = list(cfg.get("inject", [])) + a.inject
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    metrics = a.metrics or (os.path.join(a.out, "metrics.jsonl") if a.out else None)
    res = run(a.model, a.out, cfg, engine_model=a.engine_model, metrics=metrics, repairs=not a.no_repairs,
              log_every=a.log_every)
    ev = res["evals"]
    if len(ev) >= 2:
        cs = res["check_seconds"]
        print(f"done: {res['steps']} RL steps in {res['seconds']:.0f} s with vLLM sampling; held-out greedy "
              f"accuracy {ev[0]['eval_accuracy']:.3f} -> {ev[-1]['eval_accuracy']:.3f}; checks "
              f"{sum(cs) / max(len(cs), 1):.2f} s per sync", file=sys.stderr)
    return 0


def cmd_faults(a: argparse.Namespace) -> int:
    from .matrix import markdown, misses, run_matrix, write_reports, write_task

    only = [s for s in a.only.split(",") if s] if a.only else None
    os.makedirs(a.out, exist_ok=True)
    task = a.task or write_task(os.path.join(a.out, "task.jsonl"))
    res = run_matrix(a.model, task, a.engine_model, only, log=sys.stderr)
    write_reports(a.out, res, markdown([res], "## Sync faults at vLLM's seams"))
    print(f"wrote {a.out}/vllm-faults.md and {a.out}/vllm-faults.json", file=sys.stderr)
    missed, clean_flagged = misses(res)
    if clean_flagged or missed:
        print(f"faults: clean run {'raised findings' if clean_flagged else 'clean'}; "
              f"not caught by their condition's check at the first sync: {missed or 'none'}", file=sys.stderr)
        return 1
    return 0


def cmd_check(a: argparse.Namespace) -> int:
    from . import bundle as bundle_mod
    from . import checks
    from .engine import VllmEngine

    with VllmEngine(a.engine_model or a.model) as eng:
        prev = None
        if a.previous:
            pb = Path(a.previous).read_bytes()
            prev = bundle_mod.parse(pb)
            eng.apply(pb, prev.version)
        b = Path(a.bundle).read_bytes()
        exp = bundle_mod.parse(b)
        eng.apply(b, exp.version)
        rs = checks.run(eng, exp, prev, {"agreement": False}, version=exp.version)
    for r in rs:
        if r["ran"]:
            print(f"{r['name']}: {'pass' if r['passed'] else 'FAIL'}")
            for f in r["findings"]:
                print(f"  {f}")
    return 0 if all(r["passed"] for r in rs) else 1


def _stamp() -> str:
    """mxrl.diverge.stamp()'s date, mxrl version and CPU, with the commit when run from a source checkout."""
    import subprocess

    from mxrl.diverge import stamp

    date, rest = stamp().split(", ", 1)
    try:
        r = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            return f"{date}, commit {r.stdout.strip()}, {rest}"
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{date}, {rest}"


def _write_reports(out: Path, stem: str, res: dict, markdown) -> None:
    """OUT/STEM.json and OUT/STEM.md (the table, with the stamp), each renamed into place."""
    from .experiment import write_json

    write_json(str(out / f"{stem}.json"), res)
    md = out / f"{stem}.md"
    tmp = md.with_name(md.name + ".tmp")
    tmp.write_text(markdown(res, f"Measured {res['stamp']}.") + "\n")
    os.replace(tmp, md)
    print(f"mxrl-vllm: wrote {out / stem}.json and {md}", file=sys.stderr)


def cmd_experiment(a: argparse.Namespace) -> int:
    from . import experiment

    models = {k: v for k, v in (("tiny-dense", a.dense_model), ("tiny-moe", a.moe_model)) if v}
    if not models:
        raise ValueError("give --dense-model and/or --moe-model (SFT-trained checkpoints)")
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    configs = [x for x in a.configs.split(",") if x.strip()] or None
    out = Path(a.out)
    res = experiment.run(models, str(out / "engine.json"), configs=configs, task=a.task, seeds=seeds,
                         prompts=a.prompts, samples=a.samples, bootstrap=a.bootstrap,
                         progress=lambda s: print(s, file=sys.stderr, flush=True))
    res["stamp"] = a.stamp or _stamp()
    _write_reports(out, "engine", res, experiment.markdown)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    from . import bench

    out = Path(a.out)
    res = bench.run([x for x in a.shapes.split(",") if x], str(out / "engine_speed.json"),
                    samplers=[x for x in a.samplers.split(",") if x], plans=[x for x in a.plans.split(",") if x],
                    batches=[int(x) for x in a.batches.split(",") if x], rounds=a.rounds, prompt_len=a.prompt_len,
                    new_tokens=a.new_tokens, threads=a.threads, park=not a.no_park,
                    progress=lambda s: print(s, file=sys.stderr, flush=True))
    res["stamp"] = a.stamp or _stamp()
    _write_reports(out, "engine_speed", res, bench.markdown)
    return 0


def cmd_diverge(a: argparse.Namespace) -> int:
    from mxrl import diverge as dv

    from .diverge import register_engines

    register_engines()  # found without the entry points too (a source checkout)
    if not a.engine:
        a.engine = ["mxrl", "vllm"]
    a.stamp = a.stamp or _stamp()
    return dv.execute(a)


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(prog="mxrl-vllm", description="vLLM as mxrl's sampler: RL, the fault matrix, checks")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rl", help="GRPO with mxrl's learner and vLLM sampling, every sync checked on the engine")
    r.add_argument("--model", required=True, help="the learner's checkpoint (mxrl init, sft, or a training state)")
    r.add_argument("--out", default="", help="output directory (states, metrics.jsonl)")
    r.add_argument("--engine-model", help="what vLLM loads first (default --model; an MXFP8 export for MX weights)")
    r.add_argument("--metrics", help="JSONL metrics file (default OUT/metrics.jsonl)")
    r.add_argument("--config", default="", help="JSON file of RL settings")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an RL setting (repeatable)")
    r.add_argument("--inject", action="append", default=[], metavar="FAULT[@STEP]", help="inject a fault")
    r.add_argument("--no-repairs", action="store_true",
                   help="leave vLLM's stale derived copies as vLLM leaves them (the checks report them)")
    r.add_argument("--log-every", type=int, default=10, help="steps between progress lines")
    r.set_defaults(fn=cmd_rl)
    f = sub.add_parser("faults", help="the vLLM fault matrix (vllm-faults.md/.json)")
    f.add_argument("--model", required=True)
    f.add_argument("--engine-model")
    f.add_argument("--out", required=True)
    f.add_argument("--only", default="", help="comma-separated fault names")
    f.add_argument("--task", default="", help="the RL task (default: the matrix's own JSONL task, written to OUT)")
    f.set_defaults(fn=cmd_faults)
    c = sub.add_parser("check", help="refit an engine with a bundle and run checks 1-6 on it")
    c.add_argument("--model", required=True)
    c.add_argument("--engine-model")
    c.add_argument("--bundle", required=True)
    c.add_argument("--previous", help="a bundle applied first (version v-1)")
    c.set_defaults(fn=cmd_check)
    e = sub.add_parser("experiment", help="the report's real-engine part: exact KL(sampler || learner) per sampler "
                       "configuration (vLLM's kernels, mxrl's inside vLLM, mxrl's own) with bootstrap CIs")
    e.add_argument("--dense-model", default="", help="the dense SFT warm start")
    e.add_argument("--moe-model", default="", help="the MoE SFT warm start")
    e.add_argument("--out", required=True, help="output directory (engine.json, engine.md)")
    e.add_argument("--configs", default="", help="comma-separated configurations (default: all of "
                   "mxrl_vllm.experiment.CONFIGS)")
    e.add_argument("--task", default="addition:digits=3", help="the task the held-out prompts come from")
    e.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (prompts and sampling)")
    e.add_argument("--prompts", type=int, default=128, help="held-out prompts per seed")
    e.add_argument("--samples", type=int, default=4, help="samples per prompt")
    e.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    e.add_argument("--stamp", default="", help="the date/commit/CPU line (default: today, mxrl's version, this CPU)")
    e.set_defaults(fn=cmd_experiment)
    b = sub.add_parser("bench", help="generation tokens/s: vLLM (its kernels, mxrl's inside it) against mxrl's "
                       "sampler, interleaved")
    b.add_argument("--out", required=True, help="output directory (engine_speed.json, engine_speed.md)")
    b.add_argument("--shapes", default="tiny-dense,tiny-moe,qwen3-0.6b", help="random-weight models")
    b.add_argument("--samplers", default="vllm,vllm-mxrl-linear,vllm-mxrl,mxrl")
    b.add_argument("--plans", default="bf16,mxfp8")
    b.add_argument("--batches", default="1,32")
    b.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    b.add_argument("--prompt-len", type=int, default=16)
    b.add_argument("--new-tokens", type=int, default=32)
    b.add_argument("--threads", type=int, default=0, help="threads per sampler (0: every core this process may use)")
    b.add_argument("--no-park", action="store_true", help="leave idle workers running while another is measured "
                   "(default: stopped, SIGSTOP, so they cannot take CPU from it)")
    b.add_argument("--stamp", default="", help="the date/commit/CPU line (default: today, mxrl's version, this CPU)")
    b.set_defaults(fn=cmd_bench)
    d = sub.add_parser("diverge", help="where vLLM's forward pass first differs from mxrl's learner, per layer and "
                       "op (diverge.md/.json/.png; engines default: mxrl vllm)")
    from mxrl.diverge import add_arguments

    add_arguments(d)
    d.set_defaults(fn=cmd_diverge)
    a = p.parse_args(argv)
    try:
        return a.fn(a)
    except ValueError as e:
        print(f"mxrl-vllm: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
