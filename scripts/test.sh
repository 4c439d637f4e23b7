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
# Each phase ends with a line saying how long it took.
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
phase "release tests" ctest --test-dir build --output-on-failure -j"$jobs"
phase "python package" bash scripts/python.sh
phase "vllm adapter" bash scripts/vllm.sh
CC=clang CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMXRL_SANITIZE=ON -DMXRL_FUZZ=ON -DMXRL_WERROR=ON >/dev/null
phase "sanitizer build" cmake --build build-san -j"$jobs"
phase "sanitizer tests" env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  ctest --test-dir build-san --output-on-failure -j"$jobs" -LE nosan
