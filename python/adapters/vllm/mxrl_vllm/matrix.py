"""The vLLM fault matrix: every fault of the vLLM path on a short GRPO run, and a clean run.

Each run: mxrl's learner on `model`, vLLM sampling (``mxrl_vllm.rl``), checks
on ``warn`` so every sync is recorded, the fault injected from step 2 (the
sync that ends step 2 is the first it touches; the syncs before it are
clean). A fault is caught when that sync fails the check of the condition it
breaks; the row records every check that failed there, the first finding,
and whether any sync failed before the fault was active (a false alarm).

The task (``write_task``) is one-digit addition behind a fixed instruction of
49 characters: like a system prompt, the instruction fills a KV block of the
engine (32 tokens on the CPU build), so its prefix cache holds entries that a
stale-cache fault leaves behind (the demo's bare addition prompts fill no
block, so there nothing stale can be reused). The model is a warm start
trained on the task (``scripts/vllm_faults.sh`` makes one: 150 SFT steps reach
about 45% held-out accuracy), so that rewards vary and every step changes the
weights (a learning rate of 5e-4 moves some MX codes of every tensor): a fault
that leaves a tensor unwritten is then visible.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from . import faults as faults_mod
from .checks import NAMES as CHECKS
from .engine import Layout
from .rl import run as rl_run

INSTRUCTION = "Add the two numbers, answer with the digits only: "


def write_task(path: str, n: int = 4000, seed: int = 0) -> str:
    """A JSONL task of n one-digit additions behind INSTRUCTION; returns its mxrl task name."""
    import random

    rng = random.Random(seed)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for _ in range(n):
            a, b = rng.randint(0, 9), rng.randint(0, 9)
            f.write(json.dumps({"prompt": f"{INSTRUCTION}{a}+{b}=", "answer": str(a + b)}) + "\n")
    os.replace(tmp, path)
    return f"jsonl:{path}"


RUN = {"steps": 3, "prompts_per_step": 8, "samples_per_prompt": 4, "optim": {"lr": 5e-4},
       "max_new_tokens": 8, "checks": "warn", "eval_problems": 4, "probe_prompts": 4, "seed": 0}
INJECT_AT = 2


def run_one(model: str, engine_model: str, fault: Optional[str], log, task: str) -> Dict[str, Any]:
    cfg = dict(RUN, task=task)
    cfg["inject"] = [f"{fault}@{INJECT_AT}"] if fault else []
    syncs: List[Dict[str, Any]] = []
    trained: List[int] = []
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        error = ""
        with open(os.devnull, "w") as quiet:
            try:
                rl_run(model, "", cfg, engine_model=engine_model, metrics=metrics, log=quiet,
                       engine_kwargs={"block_size": 32})
            except Exception as e:  # noqa: BLE001 - an engine a fault broke may crash after its sync was recorded
                error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        with open(metrics) as f:
            for line in f:
                o = json.loads(line)
                if "sync" in o:
                    syncs.append(o["sync"])
                if "trained_sequences" in o:
                    trained.append(int(o["trained_sequences"]))
    failed = {}
    for s in syncs:
        bad = {n: c for n, c in (s.get("checks") or {}).items() if c.get("ran", True) and not c.get("passed", True)}
        if bad or not s.get("applied", True):
            failed[int(s["version"])] = (bad, s.get("error", ""))
    before = sorted(v for v in failed if v < INJECT_AT)
    first = min((v for v in failed if v >= INJECT_AT), default=None)
    row = {"fault": fault or "(clean)", "syncs": len(syncs), "trained_sequences": trained,
           "false_alarm_versions": before,
           "caught_at": first, "seconds": round(time.perf_counter() - t, 1)}
    if error:
        row["run_error"] = error  # after the syncs recorded above
    if first is not None:
        bad, err = failed[first]
        row["failed_checks"] = sorted(bad, key=lambda n: CHECKS.index(n))
        row["first_finding"] = next((c["findings"][0] for c in bad.values() if c.get("findings")), err)
        row["refit_error"] = err
    print(f"faults: {row['fault']}: " + (f"caught at version {first} by {', '.join(row['failed_checks'])}"
                                        if first is not None else "no check failed") +
          (f" (false alarm at {before})" if before else "") + f" ({row['seconds']} s)", file=log, flush=True)
    gc.collect()
    return row


def run_matrix(model: str, task: str, engine_model: Optional[str] = None, only: Optional[List[str]] = None,
               log=None) -> Dict[str, Any]:
    layout = Layout.read(engine_model or model)
    cat = {f["name"]: f for f in faults_mod.catalogue()}
    names = [f.name for f in faults_mod.FAULTS if (not only or f.name in only)]
    rows = [run_one(model, engine_model, None, log, task)]
    for n in names:
        why = faults_mod.applies(faults_mod.BY_NAME[n], layout)
        if why:
            rows.append({"fault": n, "condition": cat[n]["condition"], "skipped": why})
            continue
        r = run_one(model, engine_model, n, log, task)
        r["condition"] = cat[n]["condition"]
        r["expected_check"] = CHECKS[cat[n]["condition"] - 1]
        r["caught_by_expected"] = r.get("caught_at") == INJECT_AT and r["expected_check"] in r.get("failed_checks", [])
        rows.append(r)
    return {"model": model, "engine_model": engine_model or model, "mx": layout.mx, "moe": layout.experts > 0,
            "tied": layout.tied, "run": dict(RUN, task=task), "inject_at": INJECT_AT, "rows": rows}


def markdown(results: List[Dict[str, Any]], header: str) -> str:
    out = [header, ""]
    for r in results:
        kind = f"{'MoE' if r['moe'] else 'dense'}, {'tied' if r['tied'] else 'untied'} head, " \
               f"{'MXFP8 export (mxrl kernel)' if r['mx'] else 'BF16 weights'}"
        out += [f"### {kind}", "", "| fault | condition | caught at sync | failed checks | first finding |",
                "|---|---|---|---|---|"]
        for row in r["rows"]:
            if "skipped" in row:
                out.append(f"| {row['fault']} | {row['condition']} | n/a | | {row['skipped']} |")
                continue
            caught = "-" if row.get("caught_at") is None else str(row["caught_at"])
            if row.get("false_alarm_versions"):
                caught += f" (false alarm at {row['false_alarm_versions']})"
            f = (row.get("first_finding") or "").replace("|", "\\|")
            out.append(f"| {row['fault']} | {row.get('condition', '')} | {caught} | "
                       f"{', '.join(row.get('failed_checks', []))} | {f[:160]} |")
        out.append("")
    return "\n".join(out)


def misses(result: Dict[str, Any]) -> Tuple[List[str], bool]:
    """(faults not caught at their first sync by their condition's check, whether the clean run raised findings)."""
    missed = [r["fault"] for r in result["rows"][1:] if "skipped" not in r and not r.get("caught_by_expected")]
    return missed, result["rows"][0].get("caught_at") is not None


def write_reports(out_dir: str, payload: Any, md: str) -> None:
    """vllm-faults.json (payload) and vllm-faults.md into out_dir, each written whole then renamed into place."""
    for name, text in (("vllm-faults.json", json.dumps(payload, indent=1)), ("vllm-faults.md", md)):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, os.path.join(out_dir, name))

