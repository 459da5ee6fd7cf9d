#!/bin/bash
# cuobjdump and nvdisasm for reading SASS on a machine whose toolkit lacks them (the CI / build
# machine's CUDA 13.0 has nvcc and ptxas only). NVIDIA publishes both on PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm); the 13.x tools read this toolkit's sm_90a cubins.
# Idempotent: fetched once into .deps/cuda-tools. Prints the folder that holds the two binaries.
#   scripts/sass_tools.sh                      -> .deps/cuda-tools/nvidia/cu13/bin
#   $(scripts/sass_tools.sh)/cuobjdump -res-usage build/CMakeFiles/kosmos.dir/src/ops/op_kernel.cu.o
#   $(scripts/sass_tools.sh)/cuobjdump -sass -fun NAME OBJ | grep -n 'STL\|LDL'   (spills, by place)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.deps/cuda-tools
bin=$dest/nvidia/cu13/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps -d "$tmp" "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14" >&2
  mkdir -p "$dest"
  for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$dest"; done
  chmod +x "$bin/cuobjdump" "$bin/nvdisasm"
fi
echo "$bin"
