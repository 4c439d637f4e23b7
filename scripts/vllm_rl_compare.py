#!/usr/bin/env python3
"""GRPO with vLLM sampling against GRPO with mxrl's own sampler, same learner, same seeds.

For each preset: one SFT warm start (the demo's SFT phase, shortened by --sft-steps),
then per seed `mxrl rl` (mxrl's on-grid sampler) and `mxrl-vllm rl` (vLLM, every sync
checked on the engine) with the same RL settings. Writes OUT/vllm-rl.json and
OUT/vllm-rl.md: held-out greedy accuracy before/after, mean exact KL per step, |dlogp|,
check results and cost per sync, wall time. Run it in the venv scripts/vllm.sh makes:

  build-py/venv/bin/python scripts/vllm_rl_compare.py --out reports/vllm-rl [--presets tiny-dense,tiny-moe]
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = "addition:digits=3,carry_drop=60"  # the demo's task


def sh(cmd, log):
    print("+ " + " ".join(map(str, cmd)), file=sys.stderr, flush=True)
    with open(log, "w") as f:
        subprocess.run([str(c) for c in cmd], check=True, stdout=f, stderr=subprocess.STDOUT)


def read_metrics(path):
    steps, evals = [], []
    for line in open(path):
        o = json.loads(line)
        if "eval_accuracy" in o:
            evals.append(o)
        elif "reward_mean" in o:
            steps.append(o)
    return steps, evals


def summarize(path):
    steps, evals = read_metrics(path)
    kl = [s["mismatch"].get("kl_mean") for s in steps if s["mismatch"].get("kl_mean") is not None]
    dl = [s["mismatch"].get("abs_dlogp_max") for s in steps if s["mismatch"].get("abs_dlogp_max") is not None]
    checks = [s["sync"] for s in steps]
    failed = sum(1 for c in checks if any(not v["passed"] for v in c.get("checks", {}).values()))
    return {"acc_before": evals[0]["eval_accuracy"], "acc_after": evals[-1]["eval_accuracy"],
            "kl_per_step": kl, "kl_mean": statistics.mean(kl) if kl else None, "abs_dlogp_max": max(dl) if dl else None,
            "syncs": len(checks), "syncs_failed": failed,
            "check_s_per_sync": statistics.mean(c["checks_s"] for c in checks) if checks else None,
            "seconds": sum(s["seconds"] for s in steps), "generate_s": sum(s["generate_s"] for s in steps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", default="tiny-dense,tiny-moe")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sft-steps", type=int, default=800)
    ap.add_argument("--rl-steps", type=int, default=100)
    ap.add_argument("--eval-problems", type=int, default=500)
    ap.add_argument("--mxrl", default=str(ROOT / "build" / "mxrl"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "runs"
    work.mkdir(exist_ok=True)
    rl = {"steps": a.rl_steps, "prompts_per_step": 16, "samples_per_prompt": 8, "eval_problems": a.eval_problems,
          "task": TASK, "optim": {"weight_decay": 0.0}}
    results = {"date": datetime.date.today().isoformat(), "rl": rl, "sft_steps": a.sft_steps, "presets": {}}
    try:
        results["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
        results["cpu"] = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
                              platform.processor())
        import torch, vllm  # noqa: E401
        results["vllm"], results["torch"] = vllm.__version__, torch.__version__
    except Exception as e:  # noqa: BLE001
        results["versions_error"] = str(e)
    for preset in a.presets.split(","):
        base = work / preset
        base.mkdir(exist_ok=True)
        if not (base / "sft" / "final").is_dir():
            sh([a.mxrl, "init", "--preset", preset, "--out", base / "init"], base / "init.log")
            sh([a.mxrl, "sft", "--model", base / "init", "--task", TASK, "--steps", a.sft_steps, "--batch-size", 64,
                "--recipe", "mxfp8", "--lr", 2e-3, "--warmup", 30, "--schedule", "cosine", "--eval-every", 0,
                "--eval-problems", 0, "--samples", 0, "--out", base / "sft"], base / "sft.log")
        rows = []
        for seed in [int(s) for s in a.seeds.split(",")]:
            row = {"seed": seed}
            for engine in ("mxrl", "vllm"):
                d = base / f"{engine}-seed{seed}"
                m = base / f"{d.name}.metrics.jsonl"
                if not m.is_file():
                    t = time.time()
                    if engine == "mxrl":
                        sh([a.mxrl, "rl", "--model", base / "sft" / "final", "--out", d, "--metrics", m, "--task", TASK,
                            "--steps", a.rl_steps, "--prompts-per-step", 16, "--samples-per-prompt", 8,
                            "--eval-problems", a.eval_problems, "--weight-decay", 0, "--seed", seed], base / f"{d.name}.log")
                    else:
                        cfg = dict(rl, seed=seed)
                        (base / f"{d.name}.json").write_text(json.dumps(cfg))
                        sh([sys.executable, "-m", "mxrl_vllm", "rl", "--model", base / "sft" / "final", "--out", d,
                            "--metrics", m, "--config", base / f"{d.name}.json"], base / f"{d.name}.log")
                    print(f"{preset} seed {seed} {engine}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
                row[engine] = summarize(m)
            rows.append(row)
            results["presets"][preset] = rows
            (out / "vllm-rl.json").write_text(json.dumps(results, indent=1))
    lines = [f"# GRPO with vLLM sampling vs mxrl's own sampler",
             "",
             f"{results['date']}, commit {results.get('commit')}, {results.get('cpu')}; vLLM {results.get('vllm')}, "
             f"torch {results.get('torch')}. Made by `scripts/vllm_rl_compare.py`. Same SFT warm start "
             f"({a.sft_steps} steps, the demo's SFT recipe), then {a.rl_steps} GRPO steps x 16 prompts x 8 samples "
             f"on {TASK}, mxfp8 learner, per seed; held-out greedy accuracy on {a.eval_problems} problems "
             "(mxrl's model of the learner's weights).", ""]
    for preset, rows in results["presets"].items():
        lines += [f"## {preset}", "",
                  "| seed | sampler | accuracy before -> after | mean exact KL / token | max abs dlogp | syncs failing a check | checks s/sync | RL wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            for engine in ("mxrl", "vllm"):
                s = r[engine]
                lines.append(f"| {r['seed']} | {engine} | {s['acc_before']:.3f} -> {s['acc_after']:.3f} | "
                             f"{s['kl_mean']:.2e} | {s['abs_dlogp_max']:.2e} | {s['syncs_failed']}/{s['syncs']} | "
                             f"{s['check_s_per_sync']:.2f} | {s['seconds']:.0f} |")
        kl = rows[0]["vllm"]["kl_per_step"]
        lines.append("\nvLLM sampling, seed 0, mean exact KL per token at steps 1, 11, 21, ...: " +
                     ", ".join(f"{k:.1e}" for k in kl[::10]))
        for engine in ("mxrl", "vllm"):
            acc = [r[engine]["acc_after"] for r in rows]
            lines.append(f"\n{engine}: accuracy after RL {statistics.mean(acc):.3f} "
                         f"(sd {statistics.pstdev(acc):.3f} over {len(acc)} seeds)")
        lines.append("")
    (out / "vllm-rl.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/vllm-rl.md", file=sys.stderr)


if __name__ == "__main__":
    main()
