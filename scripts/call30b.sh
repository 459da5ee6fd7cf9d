#!/bin/bash
# The thirtieth session's experiment: the claim helper (warp 1 claims the CTA's next task for the
# ring carry, starting kGemmClaimLead k blocks before the producer's last load, instead of the
# producer thread after it). Question: is the carry's 2-5 % loss in fused layers the producer's
# post-load claim chain (six or more dependent L2 round trips in tasks with waits and signals)
# holding the body's closing barrier? If so, h30 with KOSMOS_RING_CARRY=2 beats the default.
# 1. the carry's tests on h30 (every GEMM-only launch carries by default, so the GEMM op tests
#    exercise the helper too);
# 2. fused MoE A/B (processes alternated, two rounds, phase times in round 1): p28 with
#    KOSMOS_PUBLISH=2 (= the session's start code), h30 (carry in GEMM-only launches, as p28) and
#    h30 with the carry in fused layers;
# 3. time allowing: issue 3's grouped GEMM with h30 (carry on / off in one process), then the issue
#    tables with p28 + KOSMOS_PUBLISH=2 (the start code's defaults).
#   run(command="scripts/call30b.sh", carry=["build/variants/p28", "build/variants/h30"])
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack h30 kosmos_gpu_tests) || exit 1
gtest_step tests-carry 200 "$T" 'GpuRingCarry.*:GpuMoePublish.*:GpuGemmOp.*:GpuRuntime.*'
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab p28@KOSMOS_PUBLISH=2 h30 h30@KOSMOS_RING_CARRY=2 2>&1
mv $OUT/variants-logs.tgz $OUT/ab-h30.tgz 2>/dev/null
echo "ab $(el)"
if [ $(($(date +%s) - start)) -lt 340 ]; then
  grouped_carry_table h30 30th-h30
  mv $OUT/gemm $OUT/gemm-h30
fi
if [ $(($(date +%s) - start)) -lt 390 ]; then
  KOSMOS_PUBLISH=2 moe_final_form p28 30th
  echo "final form p28 (KOSMOS_PUBLISH=2) $(el)"
fi
echo "done $(el)"
