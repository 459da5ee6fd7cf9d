#!/bin/bash
# The twenty-eighth session's first experiment call: who releases a finished task's signals
# (GpuOptions::publish, KOSMOS_PUBLISH: 0 thread 0 with red.release per signal -- each one a
# MEMBAR.ALL.GPU in SASS --, 1 thread 0 with one fence and relaxed adds, 2 warp 1 with one fence and
# relaxed adds while thread 0 claims). Question: is the ring carry's cost in fused layers thread 0's
# MEMBAR waiting for the carried TMA loads it issued? First the fused MoE (Qwen3 / DeepSeek-V3
# forward, Qwen3 saved backward, T = 4096) in each mode with the carry off (default) and on
# (KOSMOS_RING_CARRY=2), processes alternated, two rounds; then traces, the targeted tests (runtime
# DAGs and epochs in every mode, the MoE in every mode with and without the carry) and, time
# allowing, the issue tables and the whole suite.
#   run(command="scripts/call28a.sh", carry=["build/variants/p28"])
. "$(dirname "$0")/device_lib.sh"
device_start
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab p28 p28@KOSMOS_PUBLISH=1 p28@KOSMOS_RING_CARRY=2 \
  p28@KOSMOS_PUBLISH=2@KOSMOS_RING_CARRY=2 2>&1
echo "ab $(el)"
# Traces of the Qwen3 forward (per task label: SM time, gaps): the default against warp 1's release
# with the carry, and the carry alone.
K=$(scripts/variants.sh unpack p28 kosmos) || exit 1
mkdir -p $OUT/trace
for v in "0 1" "0 2" "2 2"; do
  set -- $v
  KOSMOS_PUBLISH=$1 KOSMOS_RING_CARRY=$2 timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas \
    --trace-svg $OUT/trace/q-p$1-c$2.svg > $OUT/trace/q-p$1-c$2.txt 2>&1
  echo "== publish $1 carry $2 rc=$? $(el)"; grep -vE "^\s*$" $OUT/trace/q-p$1-c$2.txt | tail -14 | cut -c1-160
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
# The runtime's DAG / epoch tests in every mode, the MoE in every mode with and without the carry;
# then, time allowing, the whole suite with warp 1 releasing (KOSMOS_PUBLISH=2 overrides every
# executor's option) and the engine and NCCL (.sys) tests.
T=$(scripts/variants.sh unpack p28 kosmos_gpu_tests) || exit 1
gtest_step tests-publish 200 "$T" 'GpuRuntime.*:GpuMoePublish.*'
# The issue tables (forward against the cuBLAS pipeline, saved backward against torch autograd) with
# warp 1 releasing and the carry in fused layers (the candidate default), time allowing.
if [ $(($(date +%s) - start)) -lt 400 ]; then
  KOSMOS_PUBLISH=2 KOSMOS_RING_CARRY=2 moe_final_form p28 28th-p2c2
  echo "final form (KOSMOS_PUBLISH=2 KOSMOS_RING_CARRY=2) $(el)"
fi
if [ $(($(date +%s) - start)) -lt 300 ]; then
  KOSMOS_PUBLISH=2 TEST_TIMEOUT=200 scripts/variants.sh tests p28 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
  mv $OUT/results.tgz $OUT/tests-p28-publish2.tgz; echo "suite (KOSMOS_PUBLISH=2) $(el)"
fi
