#!/usr/bin/env bash
# Installs the Debian packages mxrl builds with (as root), only when one is missing.
set -euo pipefail
pkgs=(cmake g++ make clang libclang-rt-14-dev libgtest-dev libbenchmark-dev
      nlohmann-json3-dev libxxhash-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev
      libtomlplusplus-dev libdnnl-dev ocl-icd-opencl-dev python3-matplotlib libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
