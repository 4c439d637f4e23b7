#!/usr/bin/env python3
"""Does a vLLM worker slow mxrl's sampler in the interleaved bench (mxrl_vllm.bench)?

mxrl's sampler runs in a bench worker and generates (the same call the bench
times) under these conditions, the live ones interleaved round by round:

  alone-before  no vLLM process yet
  idle          a loaded vLLM worker alive, idle for `--idle` seconds before the call
  after-vllm    right after that worker's own generate call (the bench's pattern
                before it parked idle workers)
  parked        the same, then the vLLM worker SIGSTOPped (alive, holding its
                memory, never scheduled): what the bench now does (Workers(park=True))
  alone-after   the vLLM worker gone

For every mxrl call it records the CPU time the vLLM worker used during it
(/proc/PID/stat), and once the CPU affinity of every thread of both workers.
--vllm-env picks the vLLM worker's environment: "bench" (mxrl_vllm.bench.worker_env:
OMP_NUM_THREADS set, libgomp's default wait policy), "unset" (no OMP_NUM_THREADS),
"active" (OMP_WAIT_POLICY=ACTIVE: idle OpenMP threads spin, as with libiomp's
KMP_BLOCKTIME=infinite) or "passive" (OMP_WAIT_POLICY=PASSIVE: they sleep at once).
Run with the adapter importable, e.g.

  PYTHONPATH=python/adapters/vllm MXRL_BIN=build/mxrl build-py/venv/bin/python scripts/bench/vllm_gap.py
"""
import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from mxrl_vllm import bench

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK  # utime, stime (fields 14, 15)


def affinities(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.setdefault(",".join(map(str, sorted(os.sched_getaffinity(int(tid))))), []).append(int(tid))
        except OSError:
            pass
    return {k: len(v) for k, v in out.items()}  # affinity -> number of threads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--plan", default="bf16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--idle", type=float, default=1.0, help="seconds the vLLM worker idles before an 'idle' call")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--vllm-env", choices=("bench", "unset", "active", "passive"), default="bench")
    ap.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    threads = a.threads or bench.default_threads()
    wd = Path(a.work) / "mxrl-engine-bench"
    wd.mkdir(parents=True, exist_ok=True)
    model = bench.make_models(wd, [a.shape])[a.shape]
    ctx = mp.get_context("spawn")
    mx = bench.Workers(ctx, model, str(wd), threads, park=False)
    env = bench.worker_env(threads)
    if a.vllm_env == "unset":
        env["OMP_NUM_THREADS"] = None
    elif a.vllm_env in ("active", "passive"):
        env["OMP_WAIT_POLICY"] = a.vllm_env.upper()
    vl = bench.Workers(ctx, model, str(wd), threads, env=env, park=False)
    shape = (a.batch, a.prompt_len, a.new_tokens)
    res = {k: [] for k in ("alone-before", "idle", "after-vllm", "parked", "alone-after")}
    vcpu = {k: [] for k in ("idle", "after-vllm", "parked")}
    vown = []  # the vLLM worker's CPU seconds per wall second in its own calls: the cores it computes on
    log = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)
    try:
        if why := mx.start("mxrl", a.plan):
            sys.exit(f"mxrl: {why}")
        mk = ("mxrl", a.plan)
        mx.call(mk, *shape)  # warm-up
        for _ in range(a.rounds):
            res["alone-before"].append(mx.call(mk, *shape))
        log(f"alone: {res['alone-before']}")
        if why := vl.start("vllm", a.plan):
            sys.exit(f"vllm: {why}")
        vk = ("vllm", a.plan)
        vpid = vl.pid(vk)
        vl.call(vk, *shape)  # warm-up
        aff = {"mxrl": affinities(mx.pid(mk)), "vllm": affinities(vpid)}
        conds = ["idle", "after-vllm", "parked"]
        for r in range(a.rounds):
            for c in conds[r % 3:] + conds[:r % 3]:
                if c == "idle":
                    time.sleep(a.idle)
                else:
                    c0 = cpu_seconds(vpid)
                    wall = vl.call(vk, *shape)
                    vown.append((cpu_seconds(vpid) - c0) / wall)
                if c == "parked":
                    os.kill(vpid, signal.SIGSTOP)
                c0 = cpu_seconds(vpid)
                try:
                    res[c].append(mx.call(mk, *shape))
                finally:
                    vcpu[c].append(cpu_seconds(vpid) - c0)
                    if c == "parked":
                        os.kill(vpid, signal.SIGCONT)
            log(f"round {r + 1}/{a.rounds} done")
        vl.close()
        for _ in range(a.rounds):
            res["alone-after"].append(mx.call(mk, *shape))
    finally:
        vl.close()
        mx.close()
    tokens = a.batch * a.new_tokens
    out = {"config": vars(a) | {"threads": threads, "vllm_worker_env": env}, "affinity": aff, "seconds": res,
           "vllm_cpu_seconds_during_mxrl_call": vcpu, "vllm_cores_busy_in_own_call": vown, "loadavg": open("/proc/loadavg").read().split()[:3]}
    base = statistics.median(res["alone-before"] + res["alone-after"])
    print(f"mxrl {a.plan} {a.shape}, batch {a.batch}, {a.prompt_len}-token prompts, {a.new_tokens} new tokens, "
          f"{threads} threads; vLLM worker env: {a.vllm_env}; load {' '.join(out['loadavg'])}")
    print("| condition | mxrl tok/s median [min, max] | vs alone | vLLM worker CPU s during the call |")
    print("|---|---:|---:|---:|")
    for c, v in res.items():
        tk = [tokens / t for t in v]
        cpu = f"{statistics.median(vcpu[c]):.2f}" if c in vcpu else "-"
        print(f"| {c} | {statistics.median(tk):.1f} [{min(tk):.1f}, {max(tk):.1f}] | "
              f"{base / statistics.median(v):.3f} | {cpu} |")
    print(f"thread affinity (cores: threads): {json.dumps(aff)}; vLLM's own calls kept "
          f"{statistics.median(vown):.2f} cores busy (CPU s / wall s)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
