#!/usr/bin/env bash
# Builds everything (all CUDA code for sm_90a) and runs the tests: the CPU tests always; the GPU
# tests too when a Hopper GPU is visible (they skip, saying so, otherwise).
# Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build build -j"$(nproc)"
labels="unit"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q H[12]00; then labels="unit|gpu"; fi
ctest --test-dir build -L "$labels" --output-on-failure --timeout 900 "$@"
