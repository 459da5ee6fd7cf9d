#!/bin/bash
# The twenty-fourth session's sixth device call: swig2 (swiglu_backward with two vectors per lane
# per round, six loads in flight instead of three) against final24b (the same code before it):
#   run(command="scripts/call24f.sh", carry=["build/variants/final24b", "build/variants/swig2"])
# 1. Correctness: every GpuMoe* test of swig2 (four shards in parallel).
# 2. Speed, alternated process by process, two rounds (phase times in round 1: swiglu_backward's
#    launch alone): Qwen3 and DeepSeek-V3 T = 4096 saved backward, Qwen3 T = 4096 forward (the
#    merging variant's registers moved: 176 / 260 -> 180 / 264 B of spill).
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
T=$(scripts/variants.sh unpack swig2 kosmos_gpu_tests) || exit 1
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 240 "$T" --gtest_filter='GpuMoe*' > $OUT/moe-tests-$i.txt 2>&1 &
done
wait
echo "GpuMoe* tests $(grep -hE '^\[  (PASSED|FAILED)' $OUT/moe-tests-*.txt | tr -s ' ' | tr '\n' ';') $(el)"
grep -hE "Failure|FAILED" $OUT/moe-tests-*.txt | head -6
Q="--model,qwen3-235b,--tokens,4096"
D="--model,deepseek-v3,--tokens,4096"
ROUNDS=2 CASES="qb:$Q,--backward,--save-activations db:$D,--backward,--save-activations qf:$Q,--skip-cublas" \
  timeout 280 scripts/variants.sh ab final24b swig2
mv $OUT/variants-logs.tgz $OUT/ab-swig2.tgz
echo "ab done $(el)"
