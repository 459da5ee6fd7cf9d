#!/bin/bash
# The thirty-third session's second device call: GEMM2 expert-major (MoeConfig::gemm2_expert_major,
# off by default) and DeepSeek-V3 with GEMM1 expert-major in place of its claim groups of six, each
# against the default, the same binary alternated, three rounds; then (mode xc) the issue tables.
#   run(command="V=r33b scripts/call33.sh xc", carry=["build/variants/r33b"])
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r33b}
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
mkdir -p $OUT/x
gtest_step x/tests 100 "$T" 'GpuMoeExpertMajor.*'
moe_rounds "$K" 3 $OUT/x "q:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--reps,10 q2:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--reps,10,--gemm2-expert-major,1 d:--model,deepseek-v3,--tokens,4096,--skip-cublas,--reps,10 de:--model,deepseek-v3,--tokens,4096,--skip-cublas,--reps,10,--gemm1-run,1,--gemm1-group,1"
grep -h "each launch alone" $OUT/x/fwd-q*-*.txt | cut -c1-220
grep -h "moe_forward" $OUT/x/fwd-q2-1.txt $OUT/x/fwd-de-1.txt | cut -c1-420
tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
echo "experiments $(el)"
if [ "${1:-}" = xc ]; then
  moe_final_form $V ${TAG:-33rd}
  echo "final form $(el)"
fi
