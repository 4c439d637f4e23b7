#!/usr/bin/env python3
"""Does PyTorch beside it slow mxrl's training figure in competitors.py?

competitors.py times `mxrl bench train` (a child process) right after the
PyTorch variants' own timed steps, in a process that holds those models. This
script runs the same `mxrl bench train` under these conditions:

  alone        before PyTorch is imported (a process tree with no torch in it)
  after-torch  right after every PyTorch variant ran its timed steps
               (competitors.py's pattern)
  idle         the same, then --idle seconds of sleep first

after-torch and idle alternate round by round. For every mxrl run it records
the CPU seconds this (the PyTorch) process used during it (its OpenMP threads
spinning would show here) and the share of the machine's time the hypervisor
stole (/proc/stat). Prints a markdown table: tokens/s per recipe, median
[min, max] over the rounds, and each condition against `alone`. Run with the
competitors' venv, e.g.

  ~/.cache/mxrl-bench-venv/bin/python scripts/bench/train_gap.py --rounds 3
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competitors import ROOT, die, header, init_checkpoint, log, run_mxrl, torch_trainer  # noqa: E402

CONDITIONS = ("alone", "after-torch", "idle")


def proc_stat():
    return [int(v) for v in open("/proc/stat").readline().split()[1:]]


def measure(a):
    """One `mxrl bench train` run: tokens/s per recipe, this process's CPU seconds and the steal share during it."""
    s0, c0 = proc_stat(), os.times()
    j = run_mxrl(a.mxrl, ["bench", "train", "--preset", a.preset, "--recipe", "bf16", "--recipe", "mxfp8",
                          "--threads", a.threads])
    s1, c1 = proc_stat(), os.times()
    d = [y - x for x, y in zip(s0, s1)]
    out = {r["recipe"]: r["tokens_per_s"] for r in j["results"]}
    out["parent_cpu_s"] = (c1.user - c0.user) + (c1.system - c0.system)
    out["steal_share"] = d[7] / max(1, sum(d)) if len(d) > 7 else 0.0
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mxrl", type=Path, default=ROOT / "build" / "mxrl", help="mxrl binary (default: build/mxrl)")
    ap.add_argument("--preset", default="tiny-dense", choices=["tiny-dense", "tiny-moe"], help="(tiny-dense)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each condition (3)")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of sleep before an `idle` run (5)")
    ap.add_argument("--threads", type=int, default=2, help="threads for mxrl and torch (2)")
    ap.add_argument("--json", type=Path, help="also write every run to this file")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.access(a.mxrl, os.X_OK):
        die(f"{a.mxrl} is missing or not executable: build it first (scripts/build.sh)")
    # competitors.py's training settings (its defaults)
    a.tokens, a.micro_batch_tokens, a.seq_len, a.reps, a.kernels = 16384, 4096, 128, 2, None
    a.started = datetime.datetime.now().isoformat(timespec="seconds")
    runs = {c: [] for c in CONDITIONS}
    for r in range(a.rounds):
        log(f"alone {r + 1}/{a.rounds}")
        runs["alone"].append(measure(a))
    try:
        import torch
    except ImportError as e:
        die(f"{e}: run with the venv scripts/bench/competitors.sh makes")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    with tempfile.TemporaryDirectory(prefix="mxrl-train-gap-") as tmp:
        ckpt = Path(tmp) / "ckpt"
        init_checkpoint(a.mxrl, a.preset, ckpt)
        steps = {v: torch_trainer(str(ckpt), v, a) for v in ("fp32", "bf16", "autocast")}
        for r in range(a.rounds):
            for cond in ("after-torch", "idle"):
                log(f"{cond} {r + 1}/{a.rounds}")
                for step in steps.values():
                    for _ in range(a.reps):
                        step()
                if cond == "idle":
                    time.sleep(a.idle)
                runs[cond].append(measure(a))

    def cell(xs):
        return f"{statistics.median(xs):,.0f} [{min(xs):,.0f}, {max(xs):,.0f}]"

    head = header(a)
    print(f"{head}\n\n`mxrl bench train --preset {a.preset}`, idle {a.idle:g} s; median [min, max] of "
          f"{a.rounds} runs per condition\n")
    print("| condition | bf16 tokens/s | mxfp8 tokens/s | bf16 / alone | mxfp8 / alone | torch process CPU s "
          "during the run | steal share |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = {k: statistics.median(x[k] for x in runs["alone"]) for k in ("bf16", "mxfp8")}
    for c in CONDITIONS:
        rs = runs[c]
        med = {k: statistics.median(x[k] for x in rs) for k in ("bf16", "mxfp8")}
        print(f"| {c} | {cell([x['bf16'] for x in rs])} | {cell([x['mxfp8'] for x in rs])} | "
              f"{med['bf16'] / base['bf16']:.3f} | {med['mxfp8'] / base['mxfp8']:.3f} | "
              f"{max(x['parent_cpu_s'] for x in rs):.2f} (max) | {max(x['steal_share'] for x in rs):.1%} (max) |")
    if a.json:
        a.json.write_text(json.dumps(dict(header=head, args={k: str(v) for k, v in vars(a).items()}, runs=runs),
                                     indent=1))


if __name__ == "__main__":
    main()
