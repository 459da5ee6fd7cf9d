#!/bin/bash
# The twenty-seventh session's review commit (r27) on the GPU: suite, engine and NCCL tests, and the
# grouped --compare-carry once (the review folded device code: TaskContext::waits_met, drain_ring).
#   run(command="scripts/call27g.sh", carry=["build/variants/r27"])
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests r27 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-r27.tgz; echo "tests $(el)"
K=$(scripts/variants.sh unpack r27 kosmos) || exit 1
timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas > $OUT/fwd-q.txt 2>&1
echo "qwen3 fwd rc=$? $(moe_times $OUT/fwd-q.txt) $(el)"
