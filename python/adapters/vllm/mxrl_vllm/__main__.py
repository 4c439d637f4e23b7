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


def cmd_diverge(a: argparse.Namespace) -> int:
    from mxrl import diverge as dv

    from .diverge import register_engines

    register_engines()  # found without the entry points too (a source checkout)
    if not a.engine:
        a.engine = ["mxrl", "vllm"]
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
