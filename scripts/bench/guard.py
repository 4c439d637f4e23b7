#!/usr/bin/env python3
"""A by-hand regression guard for the figures the README quotes (not CI).

Runs this build's `mxrl bench decode --json` (the Qwen3-0.6B shape, random
weights, plans bf16 and mxfp8, batch 1 and 32, a few steps) and `mxrl bench
gemm --quick --json` (M = 1, 32, 512; N = K = 1024), takes the ratios out of
them (ratios, not absolute figures: each is measured against a baseline in the
same run, so they travel better across a noisy machine):

  decode mxfp8/bf16 b=B      decode tokens/s of mxfp8 over bf16 at batch B
  decode read-fraction P b=B decode bytes/s over the read bandwidth measured
                             in the same run (plan P, batch B)
  gemm P/onednn-bf16 M=M     mxrl GFLOP/s with P weights over oneDNN's BF16 matmul
                             (absent without AVX-512: oneDNN has none there)
  gemm P/onednn-f32 M=M      the same over oneDNN's FP32 matmul
  gemm mxfp8/bf16 M=M        mxrl's MXFP8 GEMM over its BF16 one

and compares them with the last recorded ones (scripts/bench/guard-baseline.json:
date, commit, CPU, kernels, the ratios), printing each difference; a change
beyond --tolerance is marked. --record rewrites the baseline with this run.
Run it before a README figure changes, on a quiet machine:

  python3 scripts/bench/guard.py                 # compare
  python3 scripts/bench/guard.py --record        # new baseline
  python3 scripts/bench/guard.py --strict        # exit 1 if a ratio fell beyond the tolerance

Only the standard library. Ratios from another CPU, thread count or pair
kernel choice do not compare: the guard says so above the table.
"""
import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "scripts" / "bench" / "guard-baseline.json"


def run_bench(binary, args):
    """One `mxrl bench ... --json`; the JSON object of its last stdout line."""
    cmd = [str(binary), "bench", *map(str, args), "--json"]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        sys.exit(f"guard.py: {' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def decode_ratios(j):
    r = {}
    rows = {(x["plan"], x["batch"]): x for x in j["results"]}
    for (plan, batch), x in sorted(rows.items()):
        r[f"decode read-fraction {plan} b={batch}"] = x["decode_ratio_to_read"]
        if "decode_ratio_to_read_interleaved" in x:  # builds from ef82646 on
            r[f"decode read-i-fraction {plan} b={batch}"] = x["decode_ratio_to_read_interleaved"]
        if plan == "mxfp8" and ("bf16", batch) in rows:
            r[f"decode mxfp8/bf16 b={batch}"] = x["decode_tokens_per_s"] / rows[("bf16", batch)]["decode_tokens_per_s"]
    return r


def gemm_ratios(j):
    r = {}
    for x in j["results"]:
        m, g = x["m"], x["gflops"]
        # oneDNN has no BF16 matmul without AVX-512 (null there): its FP32 one is always a baseline.
        for base in ("onednn_bf16", "onednn_f32"):
            if g.get(base) is not None:
                name = base.replace("_", "-")
                r[f"gemm bf16/{name} M={m}"] = g["mxrl_bf16"] / g[base]
                r[f"gemm mxfp8/{name} M={m}"] = g["mxrl_mxfp8"] / g[base]
        r[f"gemm mxfp8/bf16 M={m}"] = g["mxrl_mxfp8"] / g["mxrl_bf16"]
    return r


def describe(rec):
    return f"{rec['date']}, commit {rec['commit']}, {rec['cpu']}, {rec['threads']} thread(s), kernels {rec['kernels']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the top of scripts/bench/guard.py for the ratios.")
    ap.add_argument("--mxrl", type=Path, default=ROOT / "build" / "mxrl", help="the mxrl binary (default: build/mxrl)")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="the recorded ratios (default: %(default)s)")
    ap.add_argument("--record", action="store_true", help="write this run's ratios as the new baseline")
    ap.add_argument("--note", default="", help="with --record: a note kept in the baseline (e.g. why it is provisional)")
    ap.add_argument("--threads", type=int, default=0, help="worker threads for both benches (0: every core)")
    ap.add_argument("--steps", type=int, default=8, help="decode steps (default: %(default)s)")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="relative change marked as beyond noise (default: %(default)s)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a ratio fell by more than the tolerance")
    a = ap.parse_args()
    if not a.mxrl.exists():
        sys.exit(f"guard.py: no mxrl binary at {a.mxrl} (build first, or pass --mxrl)")

    dec = run_bench(a.mxrl, ["decode", "--shape", "qwen3-0.6b", "--plan", "bf16", "--plan", "mxfp8", "--batch", 1,
                             "--batch", 32, "--prompt-len", 16, "--steps", a.steps, "--prefill-reps", 1,
                             "--threads", a.threads])
    gem = run_bench(a.mxrl, ["gemm", "--quick", "--min-time", 0.1, "--threads", a.threads])
    prov = dec["provenance"]
    now = {
        "date": datetime.date.today().isoformat(),
        "commit": prov["commit"],
        "cpu": prov["cpu"],
        "isa": prov["isa"],
        "threads": dec["threads"],
        "kernels": f"{prov['kernels']['backend']}, {prov['kernels']['pair_kernel']['summary']}",
        "ratios": {**decode_ratios(dec), **gemm_ratios(gem)},
        "figures": {  # for reading, not compared
            "read_gbps": dec["read_gbps"],
            "decode_tokens_per_s": {f"{x['plan']} b={x['batch']}": x["decode_tokens_per_s"] for x in dec["results"]},
            "gemm_gflops": {f"M={x['m']}": x["gflops"] for x in gem["results"]},
        },
    }

    base = json.loads(a.baseline.read_text()) if a.baseline.exists() else None
    print(f"now:      {describe(now)}")
    if base:
        print(f"baseline: {describe(base)}")
        if base.get("note"):
            print(f"          note: {base['note']}")
        for key, what in (("cpu", "CPU"), ("threads", "thread count"), ("kernels", "kernels")):
            if base.get(key) != now[key]:
                print(f"warning: another {what} than the baseline's: the ratios may not compare")
        print(f"\n{'ratio':36} {'baseline':>9} {'now':>9} {'change':>8}")
        fell = 0
        for name in sorted(set(base["ratios"]) | set(now["ratios"])):
            b, n = base["ratios"].get(name), now["ratios"].get(name)
            if b is None or n is None:
                print(f"{name:36} {'-' if b is None else f'{b:9.3f}':>9} {'-' if n is None else f'{n:9.3f}':>9}")
                continue
            change = n / b - 1 if b else float("inf")
            mark = ""
            if abs(change) > a.tolerance:
                mark = "  <- fell" if change < 0 else "  <- rose"
                fell += change < 0
            print(f"{name:36} {b:9.3f} {n:9.3f} {change:+8.1%}{mark}")
        print(f"\n{fell} ratio(s) fell by more than {a.tolerance:.0%}")
    else:
        print(f"no baseline at {a.baseline}")
        for name, n in sorted(now["ratios"].items()):
            print(f"{name:36} {n:9.3f}")
        fell = 0

    if a.record:
        rec = {"note": a.note} if a.note else {}
        rec.update(now)
        tmp = a.baseline.with_name(a.baseline.name + ".tmp")  # whole or not at all
        tmp.write_text(json.dumps(rec, indent=1) + "\n")
        tmp.replace(a.baseline)
        print(f"recorded {a.baseline}")
    sys.exit(1 if a.strict and fell else 0)


if __name__ == "__main__":
    main()
