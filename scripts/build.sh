#!/usr/bin/env bash
# Installs dependencies and builds build/mxrl (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMXRL_PYTHON=OFF >/dev/null
cmake --build build -j"$(nproc)"
