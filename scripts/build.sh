#!/usr/bin/env bash
# Installs dependencies and builds build/mxrl (Release). MXRL_WERROR=ON in the
# environment makes warnings errors (scripts/test.sh sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMXRL_PYTHON=OFF -DMXRL_WERROR="${MXRL_WERROR:-OFF}" >/dev/null
cmake --build build -j"$(nproc)"
