#!/usr/bin/env bash
# The main job: builds kosmos (installing what it needs) and runs `kosmos demo` (one fused
# AllGather+GEMM layer, verified against fp64 and the unfused composition) — on the GPU when
# a Hopper GPU is visible, else on the CPU executor at a small size. Extra args go to the demo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
cmake --preset release >/dev/null
cmake --build build -j"$(nproc)" --target kosmos_cli
exec build/kosmos demo "$@"
