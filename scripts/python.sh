#!/usr/bin/env bash
# The Python package and its tests: a virtual environment (build-py/venv) with
# the build and test requirements from PyPI (scikit-build-core, nanobind,
# numpy, pytest), `pip install .` of this tree into it, then the pytest suite,
# which checks every call against the mxrl CLI in build/ (scripts/build.sh).
# The extension is built in build/ too, so the C++ libraries compiled there
# are reused and only the module itself compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build-py/venv
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then  # Debian's python3 needs python3-venv for this
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv python3-dev >/dev/null
    rm -rf "$venv" && python3 -m venv "$venv"
  fi
fi
"$venv/bin/pip" install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.4" "numpy>=1.24" "pytest>=7"
CMAKE_GENERATOR="Unix Makefiles" "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
  -C build-dir=build .
MXRL_BIN="$PWD/build/mxrl" "$venv/bin/python" -m pytest -q python/tests "$@"
