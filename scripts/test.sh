#!/usr/bin/env bash
# The test suite: the Release build's tests, the Python package's pytest suite
# (scripts/python.sh: pip install . into build-py/venv), the vLLM adapter's
# (scripts/vllm.sh: vLLM for CPUs, about 6 GB, and python/adapters/vllm into
# the same venv), then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer (clang, with the libFuzzer
# target replaying the malformed-file corpus and fuzzing for a few seconds).
# Every build here treats warnings as errors (MXRL_WERROR: gcc for the Release
# build and the Python module, which reuses its build folder; clang for the
# sanitizer build).
# Each phase ends with a line saying how long it took. The sanitizer build
# starts right after the Release build and runs in the background at the lowest
# priority (nice 19): the Release tests, pip's downloads and the mostly
# single-threaded Python suites leave a core idle much of the time (the vLLM
# adapter's suite used 1.3 of 2 cores), and the sanitizer build, the longest
# phase, fills it. (Not in a session of its own, setsid: with the kernel's
# autogroups each session gets an equal share whatever its nice value, and the
# Release tests took twice as long.) Its output goes to build-san/build.log,
# printed if it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() {  # phase NAME COMMAND...: runs it, then prints its wall time
  local t=$SECONDS name=$1
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - t)) s ($((SECONDS - start)) s so far)"
}
jobs=$(nproc)
phase "release build" env MXRL_WERROR=ON bash scripts/build.sh
CC=clang CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMXRL_SANITIZE=ON -DMXRL_FUZZ=ON -DMXRL_WERROR=ON >/dev/null
set -m  # job control: the build gets a process group of its own, so a failed phase can stop all of it
nice -n 19 cmake --build build-san -j"$jobs" >build-san/build.log 2>&1 &
san_build=$!
set +m
trap 'kill -- -"$san_build" 2>/dev/null || true' EXIT
phase "release tests" ctest --test-dir build --output-on-failure -j"$jobs"
phase "python package" bash scripts/python.sh
phase "vllm adapter" bash scripts/vllm.sh
wait_san_build() {
  if ! wait "$san_build"; then
    tail -n 60 build-san/build.log
    echo "test.sh: the sanitizer build failed (build-san/build.log)"
    return 1
  fi
}
phase "sanitizer build (rest of it)" wait_san_build
trap - EXIT
phase "sanitizer tests" env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  ctest --test-dir build-san --output-on-failure -j"$jobs" -LE nosan
