#!/bin/bash
# RECORD ONLY: ran in the twenty-fourth session on a binary whose feature was then removed
# (docs/perf-notes.md, twenty-fourth session); on main the switches it A/Bs no longer mean that.
# The twenty-fourth session's first device call (tails24 = main with merged tails in the saved
# backward's dA' and dX, the B [N, K] merged-tail tile):
#   run(command="scripts/call24.sh", carry=["build/variants/tails24"])
# 1. Correctness first: the engine's merged-tail test (B [K, N] and now B [N, K], bit for bit
#    against separate tiles) and the MoE GPU tests that merge or run the backward.
# 2. The saved backward with --merge-tails 1 / 0 (same binary; 0 plans no merging anywhere and runs
#    the plain kernel variant: main's backward), Qwen3 and DeepSeek-V3 T = 4096, two rounds
#    alternated, phase times in round 1.
# 3. torch autograd on the same routing and card (Qwen3 and DeepSeek-V3 T = 4096, saved backward).
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
E=$(scripts/variants.sh unpack tails24 gemm_engine_test) || exit 1
T=$(scripts/variants.sh unpack tails24 kosmos_gpu_tests) || exit 1
K=$(scripts/variants.sh unpack tails24 kosmos) || exit 1
timeout 120 "$E" --gtest_filter='GemmEngineGpu.MergedTails*' > $OUT/engine-merged.txt 2>&1
echo "engine merged-tail test rc=$? $(grep -E '^\[  (PASSED|FAILED)|Failure' $OUT/engine-merged.txt | tr '\n' ';') $(el)"
timeout 240 "$T" --gtest_filter='GpuMoeMergedTails.*:GpuMoeBackward*' > $OUT/moe-tests.txt 2>&1
echo "moe tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/moe-tests.txt | tr '\n' ';') $(el)"
grep -E "Failure|FAILED|error" $OUT/moe-tests.txt | head -8
Q="--model,qwen3-235b,--tokens,4096,--backward,--save-activations"
D="--model,deepseek-v3,--tokens,4096,--backward,--save-activations"
ROUNDS=2 CASES="qb1:$Q,--merge-tails,1 qb0:$Q,--merge-tails,0 db1:$D,--merge-tails,1 db0:$D,--merge-tails,0" \
  timeout 300 scripts/variants.sh ab tails24
mv $OUT/variants-logs.tgz $OUT/ab-tails24.tgz
echo "ab done $(el)"
mkdir -p $OUT/bwd
for m in qwen3-235b deepseek-v3; do
  b=$OUT/bwd/moe-bwd-$m-t4096-w1-$g-24th
  timeout 60 "$K" bench moe --model $m --tokens 4096 --backward --save-activations --dump-routing $OUT/bwd/routing-$m.json --json $b.json > $b.txt 2>&1
  echo "$m ours rc=$? $(grep -E '^  (un)?fused( backward)? \(' $b.txt | tr -s ' ' | tr '\n' ';') $(el)"
  timeout 90 python3 bench/torch_baselines.py moe --backward --routing $OUT/bwd/routing-$m.json --json $OUT/bwd/torch-moe-bwd-$m-t4096-$g-24th.json > $OUT/bwd/torch-$m.txt 2>&1
  echo "$m torch rc=$? $(grep -iE 'backward|step' $OUT/bwd/torch-$m.txt | tr '\n' ';') $(el)"
done
rm -f $OUT/bwd/routing-*.json
tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/bwd
