#!/usr/bin/env python3
"""The vLLM fault matrix on both presets: writes OUT/vllm-faults.md and OUT/vllm-faults.json.

For tiny-dense (tied head) and tiny-moe (untied): a warm start (mxrl init, then 150
SFT steps on the matrix's task, mxrl_vllm.matrix.write_task), then every fault of the
vLLM path on a short GRPO run with vLLM sampling (mxrl_vllm.matrix.run_matrix): on a
BF16 engine, and for tiny-dense also on an MXFP8 engine (the warm start's
compressed-tensors export, served by mxrl's plugin kernel). Run it in the venv
scripts/vllm.sh makes:

  build-py/venv/bin/python scripts/vllm_faults.py --out reports/vllm-faults
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from mxrl_vllm.matrix import markdown, misses, run_matrix, write_reports, write_task

ROOT = Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--mxrl", default=str(ROOT / "build" / "mxrl"))
    ap.add_argument("--only", default="", help="comma-separated fault names")
    a = ap.parse_args()
    out = Path(a.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    task = write_task(str(work / "task.jsonl"))
    only = [s for s in a.only.split(",") if s] or None

    def cli(*args):
        print("+ mxrl " + " ".join(map(str, args)), file=sys.stderr, flush=True)
        subprocess.run([a.mxrl, *map(str, args)], check=True, stdout=subprocess.DEVNULL)

    results = []
    for preset in ("tiny-dense", "tiny-moe"):
        base = work / preset
        if not (base / "sft" / "final").is_dir():
            cli("init", "--preset", preset, "--out", base / "init")
            cli("sft", "--model", base / "init", "--task", task, "--steps", 150, "--batch-size", 32, "--lr", 3e-3,
                "--warmup", 10, "--schedule", "cosine", "--eval-problems", 0, "--samples", 0, "--out", base / "sft")
        warm = str(base / "sft" / "final")
        results.append(run_matrix(warm, task, None, only, log=sys.stderr))
        results[-1]["model"] = results[-1]["engine_model"] = os.path.relpath(warm, out)
        if preset == "tiny-dense":
            mx = base / "export"
            if not mx.is_dir():
                cli("export", "--model", warm, "--format", "compressed-tensors", "--out", mx)
            results.append(run_matrix(warm, task, str(mx), only, log=sys.stderr))
            results[-1]["model"], results[-1]["engine_model"] = os.path.relpath(warm, out), os.path.relpath(mx, out)
    for r in results:  # paths as the output folder sees them
        r["run"]["task"] = "jsonl:" + os.path.relpath(task[len("jsonl:"):], out)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    import torch
    import vllm

    meta = {"date": datetime.date.today().isoformat(), "commit": commit, "cpu": cpu, "vllm": vllm.__version__,
            "torch": torch.__version__}
    header = (f"# Sync faults at vLLM's seams\n\n{meta['date']}, commit {commit}, {cpu}; vLLM {meta['vllm']}, torch "
              f"{meta['torch']}. Made by `scripts/vllm_faults.py`. Each row: a 3-step GRPO run (mxrl's learner, vLLM "
              "sampling, checks on warn), the fault active from the sync that ends step 2; `caught at` is the first "
              "sync that failed a check. Versions 0 and 1 must pass (a failure there is a false alarm).")
    write_reports(str(out), {"meta": meta, "results": results}, markdown(results, header))
    print(f"wrote {out}/vllm-faults.md", file=sys.stderr)
    missed = [(r["engine_model"], f) for r in results for f in misses(r)[0]]
    clean = [r["engine_model"] for r in results if misses(r)[1]]
    if missed or clean:
        print(f"not caught at the first sync by their condition's check: {missed}; clean runs with findings: {clean}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
