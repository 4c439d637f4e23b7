#!/usr/bin/env bash
# Step-time split of GRPO (generate, score, train, sync, checks) for the
# colocated run vs 1 learner + 1 sampler vs 2 learners + 1 sampler processes
# (mpirun, oversubscribed on a small machine: reported, not tuned to), each
# on the same tiny-dense SFT warm start and settings. Prints a table and
# writes OUT/step_split.json. Usage: step_split.sh [OUT_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/mxrl-step-split}
steps=${2:-8}
mxrl=./build/mxrl
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
rm -rf "$out" && mkdir -p "$out"
"$mxrl" init --preset tiny-dense --out "$out/init" >/dev/null 2>&1
"$mxrl" sft --model "$out/init" --task addition:digits=2 --steps 80 --out "$out/sft" --eval-problems 0 >/dev/null 2>&1
rl=(rl --model "$out/sft/final" --task addition:digits=2 --steps "$steps" --prompts-per-step 16 --samples-per-prompt 8
    --eval-problems 0 --agreement-every 1)
cores=$(nproc)
"$mxrl" "${rl[@]}" --threads "$cores" --out "$out/colocated" --metrics "$out/colocated.jsonl" 2>/dev/null
"${mpi[@]}" -np 2 "$mxrl" "${rl[@]}" --threads 1 --learners 1 --samplers 1 --out "$out/l1s1" --metrics "$out/l1s1.jsonl" 2>/dev/null
"${mpi[@]}" -np 3 "$mxrl" "${rl[@]}" --threads 1 --learners 2 --samplers 1 --out "$out/l2s1" --metrics "$out/l2s1.jsonl" 2>/dev/null
python3 - "$out" "$cores" <<'PY'
import json, sys
out, cores = sys.argv[1], sys.argv[2]
rows = []
for name, label in [("colocated", f"colocated ({cores} threads)"), ("l1s1", "1 learner + 1 sampler"),
                    ("l2s1", "2 learners + 1 sampler")]:
    steps = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"generate_s"' in l]
    steps = steps[1:]  # the first step warms caches and allocations
    n = len(steps)
    mean = lambda k: sum(s[k] for s in steps) / n
    checks = sum(s["sync"]["checks_s"] for s in steps) / n
    r = {"run": label, "steps": n, "generate_s": mean("generate_s"), "score_s": mean("score_s"),
         "train_s": mean("train_s"), "sync_s": mean("sync_s"), "checks_s": checks, "step_s": mean("seconds")}
    rows.append(r)
print("mean seconds per step (first step left out); sync includes the checks, checks = the slowest sampler's + rank 0's reference")
print(f"{'run':<26} {'generate':>9} {'score':>7} {'train':>7} {'sync':>7} {'checks':>7} {'step s':>7}")
for r in rows:
    print(f"{r['run']:<26} {r['generate_s']:>9.3f} {r['score_s']:>7.3f} {r['train_s']:>7.3f} {r['sync_s']:>7.3f} "
          f"{r['checks_s']:>7.3f} {r['step_s']:>7.3f}")
json.dump(rows, open(f"{out}/step_split.json", "w"), indent=1)
PY
