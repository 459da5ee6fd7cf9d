#!/bin/bash
# The twenty-seventh session's first device call: the ring carry's second design (c27).
#   run(command="scripts/call27a.sh", carry=["build/variants/c27"])
# 1. the carry's own GPU tests (fp64, fused == unfused, carry on == off bit for bit);
# 2. issue 3's grouped case, the default plan with and without the carry alternated in one process
#    (gemm_engine_bench --compare-carry), B [N, K] and B [K, N];
# 3. the MoE forward / saved backward, c27 against c27 with KOSMOS_RING_CARRY=0, processes alternated.
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack c27 kosmos_gpu_tests) || exit 1
gtest_step carry-tests 240 "$T" 'GpuRingCarry.*:GpuGemmOp.GroupedMerged*:GpuGemmOp.RingCarry*'
B=$(scripts/variants.sh unpack c27 gemm_engine_bench) || exit 1
for l in nt nn; do
  timeout 120 "$B" --grouped-only --layout $l --reps 20 --compare-carry --json $OUT/grouped-$l-carry.json > $OUT/grouped-$l.txt 2>&1
  echo "grouped $l rc=$? $(el)"; grep -A6 "claim orders of" $OUT/grouped-$l.txt | cut -c1-150
done
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab c27 c27@KOSMOS_RING_CARRY=0 2>&1
echo "ab $(el)"
