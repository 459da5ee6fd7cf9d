#!/bin/bash
# The twenty-fifth session's second device call: keep5 (the partial keep: weight-gradient tiles of
# one k block past the ring keep their shared operand, stage_walk.h) against main25 (95fdcc7):
#   run(command="scripts/call25b.sh", carry=["build/variants/main25", "build/variants/keep5"])
# 1. Correctness first: the engine's kept-operand test (new cases one block past the ring, every
#    tile shape) and the MoE backward tests whose weight gradients run such tiles.
# 2. Speed, alternated process by process, two rounds: Qwen3 / DeepSeek-V3 T = 4096 saved backward,
#    Qwen3 T = 4096 forward; then keep5's traced Qwen3 backward (per-phase SM time; main25's is in
#    call 1's log).
# 3. keep5's whole GPU suite, engine tests and nccl one-rank tests.
. "$(dirname "$0")/device_lib.sh"
device_start
E=$(scripts/variants.sh unpack keep5 gemm_engine_test) || exit 1
T=$(scripts/variants.sh unpack keep5 kosmos_gpu_tests) || exit 1
K=$(scripts/variants.sh unpack keep5 kosmos) || exit 1
gtest_step engine-kept 120 "$E" '*KeptOperands*'
gtest_step moe-bwd 150 "$T" 'GpuMoeBackwardLarge.WeightGradient*:*GpuMoeBackward.*/W1_Uniform'
if ! grep -q "PASSED" $OUT/engine-kept.txt || ! grep -q "PASSED" $OUT/moe-bwd.txt || grep -q FAILED $OUT/engine-kept.txt $OUT/moe-bwd.txt; then
  echo "correctness failed: no timing"; exit 1
fi
Q="--model,qwen3-235b,--tokens,4096"
D="--model,deepseek-v3,--tokens,4096"
ROUNDS=2 CASES="qb:$Q,--backward,--save-activations db:$D,--backward,--save-activations qf:$Q,--skip-cublas" \
  timeout 300 scripts/variants.sh ab main25 keep5
mv $OUT/variants-logs.tgz $OUT/ab-keep5.tgz
echo "ab done $(el)"
timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --trace-svg $OUT/t.svg > $OUT/bwd-trace-keep5.txt 2>&1
echo "trace rc=$? $(el)"; rm -f $OUT/t.svg
grep -E "^  (un)?fused backward|^  trace:|gemm d|moe_swiglu" $OUT/bwd-trace-keep5.txt | head -8
scripts/variants.sh tests keep5 > $OUT/tests.txt 2>&1
echo "tests rc=$? $(el)"; grep -E "PASSED|FAILED|passed|failed" $OUT/tests.txt | head -12
