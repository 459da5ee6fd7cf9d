#!/bin/bash
# The thirtieth session's experiment: the claim helper (warp 1 claims the CTA's next task for the
# ring carry, starting kGemmClaimLead k blocks before the producer's last load, instead of the
# producer thread after it). Question: is the carry's 2-5 % loss in fused layers the producer's
# post-load claim chain (six or more dependent L2 round trips in tasks with waits and signals)
# holding the body's closing barrier? If so, h30 with KOSMOS_RING_CARRY=2 beats the default.
# First the carry's tests on h30 (every GEMM-only launch carries by default, so the GEMM op tests
# exercise the helper too), then fused MoE A/B (processes alternated, two rounds): p28 with
# KOSMOS_PUBLISH=2 (= the session's start code), h30 (carry in GEMM-only launches, as p28) and h30
# with the carry in fused layers; then the grouped GEMM (GEMM-only launches) of both, time allowing.
#   run(command="scripts/call30b.sh", carry=["build/variants/p28", "build/variants/h30"])
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack h30 kosmos_gpu_tests) || exit 1
gtest_step tests-carry 240 "$T" 'GpuRingCarry.*:GpuMoePublish.*:GpuGemmOp.*:GpuRuntime.*'
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab p28@KOSMOS_PUBLISH=2 h30 h30@KOSMOS_RING_CARRY=2 2>&1
mv $OUT/variants-logs.tgz $OUT/ab-h30.tgz 2>/dev/null
echo "ab $(el)"
# Traces of the Qwen3 forward (per task label: SM time, gaps), h30 with and without the carry in the
# fused launch.
K=$(scripts/variants.sh unpack h30 kosmos) || exit 1
mkdir -p $OUT/trace
for c in 1 2; do
  KOSMOS_RING_CARRY=$c timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas \
    --trace-svg $OUT/trace/q-c$c.svg > $OUT/trace/q-c$c.txt 2>&1
  echo "== h30 carry $c rc=$? $(el)"; grep -vE "^\s*$" $OUT/trace/q-c$c.txt | tail -14 | cut -c1-160
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
if [ $(($(date +%s) - start)) -lt 380 ]; then
  grouped_carry_table h30 30th-h30
  mv $OUT/gemm $OUT/gemm-h30
fi
if [ $(($(date +%s) - start)) -lt 470 ]; then
  grouped_carry_table p28 30th-p28
  mv $OUT/gemm $OUT/gemm-p28
fi
echo "done $(el)"
