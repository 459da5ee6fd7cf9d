#!/bin/bash
# ncu of the Qwen3 T = 4096 forward with GEMM2 slot-major and expert-major (the thirty-fourth
# session's pending question: does GEMM2's expert-major order gain through DRAM bytes or L2 hits?).
#   run(command="V=r38 scripts/ncu35.sh", carry=["build/variants/r38"])
. "$(dirname "$0")/device_lib.sh"
device_start
K=$(scripts/variants.sh unpack ${V:-r38} kosmos) || exit 1
M=$NCU_METRICS
mkdir -p $OUT/ncu
for e in 0 1; do
  timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics $M "$K" bench moe --model qwen3-235b \
    --tokens 4096 --skip-cublas --reps 3 --gemm2-expert-major $e > $OUT/ncu/fwd-g2em$e.txt 2>&1
  echo "== GEMM2 expert-major $e (fused, then the unfused launches: route x2, offsets, dispatch, GEMM1, GEMM2, combine) rc=$? $(el)"
  ncu_summary $OUT/ncu/fwd-g2em$e.txt
done
