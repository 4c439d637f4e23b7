#!/usr/bin/env bash
# Output bits of a build: `mxrl init` (both tiny presets), `score` under every
# built-in plan with both engines (sampler, learner; the sampler alone for the FP8 grids) on both presets, and a
# short SFT (MXFP8 and BF16 recipes), each file's SHA-256 printed one per line.
# Run it on two builds and diff the output: a refactor that claims to leave the
# numerics alone must print the same lines.
#   bash scripts/check/output_bits.sh [MXRL_BINARY] [WORK_DIR]
set -euo pipefail
bin=${1:-build/mxrl}
work=${2:-$(mktemp -d)}
bin=$(readlink -f "$bin")
mkdir -p "$work"
cd "$work"
export MXRL_THREADS=2
digest() { (cd "$1" && find . -type f ! -name '*.lock' | LC_ALL=C sort | xargs sha256sum) | sed "s|  \./|  $1/|"; }
for preset in tiny-dense tiny-moe; do
  "$bin" init --preset "$preset" --seed 3 --out "init-$preset" >/dev/null 2>&1
  digest "init-$preset"
  # Prompts and continuations of mixed lengths, from the model's own vocabulary.
  python3 - "$preset" >"seqs-$preset.jsonl" <<'PY'
import random, sys
rng = random.Random(11)
for n in range(6):
    ln = rng.randint(5, 40)
    toks = [rng.randint(3, 40) for _ in range(ln)]
    print('{"tokens": %s, "prompt_len": %d}' % (toks, rng.randint(1, ln - 1)))
PY
  for plan in fp32 bf16 mxfp8 mxfp8-half mxfp8-floor fp8-block128 fp8-tensor; do
    engines="sampler learner"
    case $plan in fp8-*) engines=sampler ;; esac  # the learner trains fp32, bf16 and MX linears only
    for engine in $engines; do
      "$bin" score --model "init-$preset" --plan "$plan" --engine "$engine" --in "seqs-$preset.jsonl" \
        --out "score-$preset-$plan-$engine.jsonl" >/dev/null 2>&1
      sha256sum "score-$preset-$plan-$engine.jsonl"
    done
  done
done
for recipe in mxfp8 bf16; do
  "$bin" sft --model init-tiny-dense --task addition:digits=2 --steps 6 --batch-size 8 --recipe "$recipe" \
    --eval-problems 8 --samples 0 --out "sft-$recipe" >/dev/null 2>&1
  digest "sft-$recipe/final" | grep -v 'state.json'
  # The state file records settings and paths as well as numbers: its numbers are compared via the weights above.
done
