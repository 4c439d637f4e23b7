#!/usr/bin/env bash
# mxrl beside PyTorch (transformers) and llama.cpp (llama-cpp-python), each
# interleaved with mxrl in the same run; prints one markdown table of ratios.
# Run by hand, not in CI:
#
#   scripts/bench/competitors.sh --json /tmp/competitors.json   # everything, default sizes
#   scripts/bench/competitors.sh --only train --compile
#   scripts/bench/competitors.sh --help
#
# Makes (once) a venv at ${MXRL_BENCH_VENV:-$HOME/.cache/mxrl-bench-venv} with
# torch (CPU wheel where its index is reachable, else PyPI's), transformers,
# numpy, safetensors, gguf and llama-cpp-python (built from source: several
# minutes on 2 cores), then runs scripts/bench/competitors.py with it.
# MXRL_BENCH_REINSTALL=1 installs again; MXRL_BENCH_SKIP_INSTALL=1 never installs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${MXRL_BENCH_VENV:-$HOME/.cache/mxrl-bench-venv}
py=$venv/bin/python
marker=$venv/.mxrl-bench-installed

if [ ! -x "$py" ]; then
  echo "competitors.sh: creating venv $venv" >&2
  python3 -m venv "$venv"
fi
if [ "${MXRL_BENCH_SKIP_INSTALL:-0}" != 1 ] && { [ ! -e "$marker" ] || [ "${MXRL_BENCH_REINSTALL:-0}" = 1 ]; }; then
  echo "competitors.sh: installing packages into $venv" >&2
  "$py" -m pip install -q --upgrade pip
  # The CPU wheel of torch is far smaller than PyPI's (which pulls CUDA libraries).
  "$py" -m pip install -q --retries 1 --timeout 20 torch --index-url https://download.pytorch.org/whl/cpu \
    || "$py" -m pip install -q torch
  "$py" -m pip install -q numpy transformers safetensors gguf
  # Optional: without it the llama.cpp rows say why they were skipped.
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$py" -m pip install -q llama-cpp-python \
    || echo "competitors.sh: llama-cpp-python did not install; the llama.cpp rows will be skipped" >&2
  touch "$marker"
fi
exec "$py" "$here/competitors.py" "$@"
