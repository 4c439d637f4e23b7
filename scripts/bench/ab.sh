#!/usr/bin/env bash
# A/B two mxrl builds on one bench command, interleaved (A B A B ...) so that
# machine drift hits both alike; prints each run's figures and the median
# ratio B / A. Run by hand:
#
#   scripts/bench/ab.sh OLD/mxrl NEW/mxrl ROUNDS decode -- --shape tiny-dense --batch 1 --plan bf16 --plan mxfp8
#   scripts/bench/ab.sh OLD/mxrl NEW/mxrl ROUNDS train  -- --preset tiny-dense --micro-batch-tokens 16384
#
# decode: decode and prefill tokens/s at each (plan, batch); train: training tokens/s per recipe.
set -euo pipefail
if [ $# -lt 5 ] || [ "$5" != "--" ]; then
  echo "usage: $0 A_BIN B_BIN ROUNDS {decode|train} -- BENCH_ARGS..." >&2
  exit 2
fi
a=$1 b=$2 rounds=$3 kind=$4
shift 5
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in a b; do
    bin=$a; [ "$side" = b ] && bin=$b
    "$bin" bench "$kind" "$@" --json 2>/dev/null | tail -n 1 > "$out/$side.$r.json"
  done
done
python3 - "$out" "$rounds" "$kind" <<'PY'
import json, statistics, sys
out, rounds, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def figures(path):
    j = json.load(open(path))
    if kind == "decode":
        f = {f"{r['plan']} batch {r['batch']} decode tok/s": r["decode_tokens_per_s"] for r in j["results"]}
        f.update({f"{r['plan']} batch {r['batch']} prefill tok/s": r["prefill_tokens_per_s"] for r in j["results"]})
        return f
    return {f"{r['recipe']} train tok/s": r["tokens_per_s"] for r in j["results"]}
runs = [(figures(f"{out}/a.{i}.json"), figures(f"{out}/b.{i}.json")) for i in range(1, rounds + 1)]
for key in runs[0][0]:
    a = [x[key] for x, _ in runs]
    b = [y[key] for _, y in runs]
    ratios = [y / x for x, y in zip(a, b)]
    print(f"{key:32s} A {' '.join(f'{v:9.1f}' for v in a)}   B {' '.join(f'{v:9.1f}' for v in b)}"
          f"   B/A median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
