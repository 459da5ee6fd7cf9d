#!/bin/bash
# The thirtieth session's first call: the issue tables with the final code's defaults (p28's binary
# with KOSMOS_PUBLISH=2 equals the final code, whose only change is that host-side default), on
# whatever card comes: the MoE forward against the cuBLAS grouped pipeline and the saved backward
# against torch autograd (issue 5), then issue 3's dense shapes against cuBLAS (`bench gemm`) and the
# grouped case against torch._grouped_mm on the same group sizes.
#   run(command="scripts/call30a.sh", carry=["build/variants/p28"])
. "$(dirname "$0")/device_lib.sh"
device_start
export KOSMOS_PUBLISH=2
moe_final_form p28 30th
echo "final form $(el)"
K=$(scripts/variants.sh unpack p28 kosmos) || exit 1
mkdir -p $OUT/gemm
timeout 120 "$K" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-30th.json > $OUT/gemm/dense.txt 2>&1
echo "bench gemm rc=$? $(grep -iE 'geomean|geometric' $OUT/gemm/dense.txt | head -2 | tr '\n' ' ') $(el)"
grouped_carry_table p28 30th
# GEMM2's claim groups at the Qwen3 proxy (two slots per expert; never timed alone: the twenty-sixth
# session's groups of 2 were GEMM1's), phase times in both rounds.
mkdir -p $OUT/g2
moe_rounds "$K" 2 $OUT/g2 "q:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times g2:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,2 g3:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,3 lag:--model,qwen3-235b,--tokens,4096,--skip-cublas,--gemm2-lag,40"
for f in $OUT/g2/fwd-*.txt; do echo "$(basename $f): $(grep -h "each launch alone" $f | cut -c1-200)"; done
tar czf $OUT/g2.tgz -C $OUT g2 && rm -rf $OUT/g2
echo "done $(el)"
