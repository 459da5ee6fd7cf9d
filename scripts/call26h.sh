#!/bin/bash
# The twenty-sixth session's last device call: the final commit's binaries (z26; host-side
# refactors since y26) -- GPU suite, engine and NCCL tests, and the DeepSeek-V3 forward's plan.
#   run(command="scripts/call26h.sh", carry=["build/variants/z26"])
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests z26 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-z26.tgz; echo "tests $(el)"
K=$(scripts/variants.sh unpack z26 kosmos) || exit 1
timeout 60 $K bench moe --model deepseek-v3 --tokens 4096 --skip-cublas > $OUT/fwd-d.txt 2>&1
echo "rc=$? $(grep -E '^  (un)?fused \(|bitwise' $OUT/fwd-d.txt | cut -c1-120 | tr '\n' ';') $(grep -o 'claimed in groups of [0-9]* / [0-9]*' $OUT/fwd-d.txt) $(el)"
