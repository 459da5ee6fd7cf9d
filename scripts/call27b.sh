#!/bin/bash
# The twenty-seventh session's second device call (c27b: tasks whose outputs are awaited carry only
# with KOSMOS_RING_CARRY=2).
#   run(command="scripts/call27b.sh", carry=["build/variants/c27b"])
# 1. the MoE forward / saved backward: carry 1 (default) / 0 / 2, processes alternated, two rounds;
# 2. the whole GPU suite, engine and NCCL tests;
# 3. issue 3's grouped case again with --compare-carry (B [N, K]).
. "$(dirname "$0")/device_lib.sh"
device_start
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab c27b c27b@KOSMOS_RING_CARRY=0 c27b@KOSMOS_RING_CARRY=2 2>&1
mv $OUT/variants-logs.tgz $OUT/ab-logs.tgz
echo "ab $(el)"
scripts/variants.sh tests c27b 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-c27b.tgz; echo "tests $(el)"
B=$(scripts/variants.sh unpack c27b gemm_engine_bench) || exit 1
timeout 100 "$B" --grouped-only --layout nt --reps 20 --compare-carry --json $OUT/grouped-nt-carry.json > $OUT/grouped-nt.txt 2>&1
echo "grouped nt rc=$? $(el)"; grep -A4 "claim orders of" $OUT/grouped-nt.txt | cut -c1-150
