#!/bin/bash
# Eighteenth session's third device call (kept as the record of what ran; logs in bench/logs/variants-18th/): dw-pingpong's whole GPU suite, a memcheck of the bulk-route
# backward failure, and the ping-pong backward A/B against main. Everything under $OUT.
O=${OUT:-/tmp/out18}; mkdir -p $O
scripts/variants.sh tests dw-pingpong > $O/tests-dw-pingpong.txt 2>&1
cp $O/results.tgz $O/results-dw-pingpong.tgz 2>/dev/null
grep -E "PASSED|FAILED  \]|TIMEOUT" $O/tests-dw-pingpong.txt | head -20
mkdir -p /tmp/v && xz -dc build/variants/bulk-route/kosmos_gpu_tests.xz > /tmp/v/gt && chmod +x /tmp/v/gt
timeout 200 compute-sanitizer --tool memcheck --print-limit 4 /tmp/v/gt --gtest_filter='GpuMoeRouteSplit.Backward' > $O/memcheck.txt 2>&1
grep -E "Invalid|at 0x|Address|bytes (after|before)|allocation|Thread|Block|error" $O/memcheck.txt | head -24
CASES="qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" ROUNDS=2 scripts/variants.sh ab main dw-pingpong 2>&1 | tail -12
