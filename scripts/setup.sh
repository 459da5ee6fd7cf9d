#!/usr/bin/env bash
# Installs what kosmos needs to build, idempotently:
#   Debian: cmake, g++, GoogleTest, CLI11, nlohmann-json (skipped when already present)
#   PyPI:   nvidia-cutlass==4.2.0.0 headers (CuTe/CUTLASS), with --no-deps into $KOSMOS_DEPS/cutlass
# Usage: scripts/setup.sh            (KOSMOS_DEPS defaults to <repo>/.deps)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="${KOSMOS_DEPS:-$root/.deps}"

need_apt=()
for pkg in cmake g++ libgtest-dev libcli11-dev nlohmann-json3-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "[setup] apt-get install ${need_apt[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

cutlass_inc="$deps/cutlass/cutlass_library/source/include/cute/tensor.hpp"
if [ ! -f "$cutlass_inc" ]; then
  echo "[setup] pip install nvidia-cutlass==4.2.0.0 -> $deps/cutlass"
  py=$(command -v python3 || command -v python)
  "$py" -m pip install -q --disable-pip-version-check --no-deps --target "$deps/cutlass" nvidia-cutlass==4.2.0.0
fi
command -v nvcc >/dev/null || { echo "[setup] nvcc not on PATH: install the CUDA 13 toolkit" >&2; exit 1; }
echo "[setup] ok: deps in $deps"
