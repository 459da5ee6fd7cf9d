#!/bin/bash
# The twenty-seventh session's third device call (c27c: the ring carry by launch, on where a launch
# has GEMM tiles alone).
#   run(command="scripts/call27c.sh", carry=["build/variants/c27c"])
# 1. the whole GPU suite, engine and NCCL tests;
# 2. the MoE forward / saved backward, default (1) against 0, alternated (fused now the same code path);
# 3. issue 3's grouped table: --compare-carry both layouts, torch._grouped_mm on the same sizes;
# 4. the final form against the cuBLAS pipeline / torch autograd (moe_final_form);
# 5. the dense issue-3 shapes against cuBLAS with --compare-carry.
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests c27c 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-c27c.tgz; echo "tests $(el)"
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas" \
  ROUNDS=2 scripts/variants.sh ab c27c c27c@KOSMOS_RING_CARRY=0 2>&1 | grep -v "^    "
mv $OUT/variants-logs.tgz $OUT/ab-logs.tgz; echo "ab $(el)"
grouped_carry_table c27c 27th
B=$(scripts/variants.sh unpack c27c gemm_engine_bench) || exit 1
moe_final_form c27c 27th
echo "final form $(el)"
timeout 110 "$B" --dense-only --reps 10 --compare-carry --json $OUT/gemm/gemm-engine-dense-$g-27th.json > $OUT/gemm/dense.txt 2>&1
echo "dense rc=$? $(el)"; grep -E "geomean|^ +[0-9.]+ TF/s .*(default|carry)" $OUT/gemm/dense.txt | cut -c1-120 | head -30
tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm
