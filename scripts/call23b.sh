#!/bin/bash
# The twenty-third session's last device call: main after the short last k block's removal and the
# op kernel's split (main23 = 1e2e12d, packed from the fresh-clone CI build) against kstep (cea81b1):
#   run(command="scripts/call23b.sh", carry=["build/variants"])
# In order of need (the call may be cut by the device time left): the whole GPU suite, engine and
# nccl tests of main23; Qwen3 T = 4096 forward and saved
# backward main23 vs kstep alternated (ROUNDS, default 1, with phase times); bench gemm; one traced fused
# backward (per-label spans of the fused launch, for the next session's analysis).
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
timeout 330 scripts/variants.sh tests main23 > $OUT/tests.txt 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/tests.txt | tr -s ' ' | tr '\n' ';') $(el)"
[ -f $OUT/results.tgz ] && mv $OUT/results.tgz $OUT/tests-logs.tgz
K=$(scripts/variants.sh unpack main23 kosmos) || exit 1
ROUNDS=${ROUNDS:-1} CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  timeout 150 scripts/variants.sh ab main23 kstep
echo "ab done $(el)"
timeout 90 "$K" bench gemm --json $OUT/gemm.json > $OUT/gemm.txt 2>&1
echo "gemm rc=$? $(tail -1 $OUT/gemm.txt) $(el)"
timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --trace-svg $OUT/bwd-trace.svg > $OUT/bwd-trace.txt 2>&1
echo "trace rc=$? $(el)"; grep -A30 -i 'label' $OUT/bwd-trace.txt | head -40
