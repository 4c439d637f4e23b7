#!/usr/bin/env bash
# The distributed runtime on localhost (ctest: mpi_distributed; needs mpirun).
#   1. rank-count invariance: the final weights of a colocated run and of
#      mpirun runs with 1, 2 and 4 learner ranks (and 2 samplers) are the same
#      bytes; MoE with the load-balancing loss on 3 learners too;
#   2. off-policy 1: colocated and 2 learners + 1 sampler agree; a run resumed
#      from a mid-run state on another rank layout ends on the same bytes;
#   3. transport faults: corrupted, truncated and stale chunks are refused
#      (--checks stop ends the job with one line; warn keeps the old version
#      and runs on), and a sampler killed mid-sync ends the job with one line;
#   4. refusals: --learners/--samplers that do not fit the job.
# Usage: distributed.sh MXRL_BINARY [WORK_DIR]
set -euo pipefail
mxrl=$1
work=${2:-$(mktemp -d)}
rm -rf "$work" && mkdir -p "$work"
mpi=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
fail() { echo "FAIL: $*" >&2; exit 1; }
same() { cmp -s "$1/final/model.safetensors" "$2/final/model.safetensors" || fail "$3: final weights differ ($1 vs $2)"; echo "ok: $3"; }

"$mxrl" init --preset tiny-dense --out "$work/init" >/dev/null 2>&1
# A short SFT warm start, so that GRPO's rewards (and updates) are not all zero.
"$mxrl" sft --model "$work/init" --task addition:digits=1 --steps 40 --out "$work/sft" --eval-problems 0 \
  --threads 1 >/dev/null 2>&1
rl=(rl --model "$work/sft/final" --task addition:digits=1 --steps 4 --prompts-per-step 8 --samples-per-prompt 4
    --eval-problems 0 --threads 1 --micro-batch-tokens 48 --sync-chunk-bytes 65536)

# 1. Rank-count invariance.
"$mxrl" "${rl[@]}" --out "$work/colocated" --metrics "$work/colocated.jsonl" 2>/dev/null
trained=$(grep -o '"trained_sequences":[0-9]*' "$work/colocated.jsonl" | awk -F: '{s += $2} END {print s + 0}')
[ "$trained" -gt 0 ] || fail "the reference run trained nothing: the invariance test would show nothing"
for layout in "1 1" "2 1" "4 1" "2 2"; do
  set -- $layout
  "${mpi[@]}" -np $(($1 + $2)) "$mxrl" "${rl[@]}" --learners "$1" --samplers "$2" --out "$work/l$1s$2" \
    --metrics "$work/l$1s$2.jsonl" 2>"$work/l$1s$2.err" || { cat "$work/l$1s$2.err"; fail "$1 learners + $2 samplers"; }
  same "$work/colocated" "$work/l$1s$2" "$1 learner(s) + $2 sampler(s) = colocated, bitwise"
done
grep -q '"sync_ranks":\[{' "$work/l2s2.jsonl" || fail "the metrics lack each sampler rank's sync report"
# MoE with the load-balancing loss (every sequence trains: the aux loss keeps them all).
"$mxrl" init --preset tiny-moe --out "$work/moe_init" >/dev/null 2>&1
moe=(rl --model "$work/moe_init" --task addition:digits=1 --steps 3 --prompts-per-step 4 --samples-per-prompt 4
     --eval-problems 0 --threads 1 --micro-batch-tokens 48 --aux-loss-coef 0.01)
"$mxrl" "${moe[@]}" --out "$work/moe" 2>/dev/null
"${mpi[@]}" -np 4 "$mxrl" "${moe[@]}" --learners 3 --samplers 1 --out "$work/moe_l3" 2>/dev/null
same "$work/moe" "$work/moe_l3" "MoE with aux loss: 3 learners + 1 sampler = colocated, bitwise"

# 2. Off-policy, and resume on another layout.
"$mxrl" "${rl[@]}" --off-policy 1 --save-every 2 --out "$work/off" 2>/dev/null
"${mpi[@]}" -np 3 "$mxrl" "${rl[@]}" --off-policy 1 --save-every 2 --learners 2 --samplers 1 --out "$work/off_mpi" \
  --metrics "$work/off_mpi.jsonl" 2>/dev/null
same "$work/off" "$work/off_mpi" "off-policy 1: 2 learners + 1 sampler = colocated"
grep -q '"staleness_max":1' "$work/off_mpi.jsonl" || fail "off-policy metrics record no staleness"
[ -f "$work/off_mpi/step-000002/pending_rollout.bin" ] || fail "the state lacks its pending rollout"
"${mpi[@]}" -np 4 "$mxrl" rl --resume "$work/off_mpi/step-000002" --learners 1 --samplers 3 --threads 1 \
  --out "$work/off_resumed" 2>/dev/null
same "$work/off" "$work/off_resumed" "off-policy resumed at step 2 on 1 learner + 3 samplers"

# 3. Transport faults.
for f in "chunk-corrupt:XXH3 does not match" "chunk-truncate:truncated or padded" "chunk-stale:(a stale chunk)"; do
  name=${f%%:*}
  want=${f#*:}
  if "${mpi[@]}" -np 3 "$mxrl" "${rl[@]}" --learners 1 --samplers 2 --inject "$name@2" --out "$work/$name" \
    >"$work/$name.err" 2>&1; then fail "$name: the job did not stop"; fi
  grep "^mxrl: error: sync of version 2 failed" "$work/$name.err" | grep -qF "$want" || { cat "$work/$name.err"; fail "$name: no one-line error"; }
  echo "ok: $name stops the job (--checks stop)"
done
"${mpi[@]}" -np 3 "$mxrl" "${rl[@]}" --learners 2 --samplers 1 --inject chunk-corrupt@2 --checks warn \
  --out "$work/warn" --metrics "$work/warn.jsonl" 2>/dev/null || fail "chunk-corrupt under --checks warn did not run on"
grep -q '"applied":false' "$work/warn.jsonl" || fail "chunk-corrupt under warn: no refused sync in the metrics"
grep '"step":2,' "$work/warn.jsonl" | grep -q '"atomicity":{"findings":\[\],"passed":true' ||
  fail "chunk-corrupt under warn: the old version did not serve whole"
echo "ok: chunk-corrupt under --checks warn: refused, the old version serves whole, the run goes on"
if "${mpi[@]}" -np 3 "$mxrl" "${rl[@]}" --learners 1 --samplers 2 --inject sampler-killed@2 --out "$work/killed" \
  >"$work/killed.err" 2>&1; then fail "sampler-killed: the job did not end"; fi
grep -q "^mxrl rl: sampler rank 1: killed half way through the bundle of version 2" "$work/killed.err" ||
  { cat "$work/killed.err"; fail "sampler-killed: no line naming the rank"; }
[ ! -d "$work/killed/final" ] || fail "sampler-killed: a final state was written"
echo "ok: sampler-killed ends the job, naming the rank"

# 4. Layouts that do not fit.
if "${mpi[@]}" -np 2 "$mxrl" "${rl[@]}" --learners 2 --samplers 1 --out "$work/bad" >"$work/bad.err" 2>&1; then
  fail "3 ranks asked of a 2-rank job"; fi
grep -q "need 3 MPI ranks, this job has 2" "$work/bad.err" || { cat "$work/bad.err"; fail "no line for the wrong size"; }
if "$mxrl" "${rl[@]}" --learners 1 --out "$work/bad2" >"$work/bad2.err" 2>&1; then fail "--learners without --samplers"; fi
grep -q "needs both --learners L and --samplers S" "$work/bad2.err" || { cat "$work/bad2.err"; fail "no line for --learners alone"; }
echo "ok: layouts that do not fit are refused"
echo "all distributed checks passed"
