#!/bin/bash
# Twenty-first session, fourth device call: `tails2` (the op kernel's plain variant without the
# merged-tail tile, and the merging variant only for plans that merge) -- the whole GPU suite, engine
# and nccl tests; bench moe main vs tails2 (alternated); then the final numbers against the cuBLAS
# grouped pipeline (JSON for bench/results/).
set -u
start=$(date +%s)
L=/tmp/call21d; mkdir -p $L/ab
trap 'tar czf "$OUT/call21d.tgz" -C $L . 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
OUT=$L timeout 260 scripts/variants.sh tests tails2 > $L/tests.txt 2>&1
echo "tests rc=$? ($(($(date +%s) - start)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $L/tests.txt | sort | uniq -c | head -20
Q="--model,qwen3-235b,--tokens,4096"
D="--model,deepseek-v3,--tokens,4096"
ROUNDS=2 CASES="qf:$Q,--skip-cublas qbal:$Q,--skip-cublas,--routing,balanced df:$D,--skip-cublas qb:$Q,--backward,--save-activations" \
  OUT=$L/ab timeout $((${BUDGET:-480} - 70 - ($(date +%s) - start))) scripts/variants.sh ab main tails2
echo "ab done ($(($(date +%s) - start)) s)"
K=$(scripts/variants.sh unpack tails2 kosmos)
for m in qwen3-235b deepseek-v3; do
  for t in 4096 128; do
    timeout 40 "$K" bench moe --model $m --tokens $t --json $L/moe-$m-t$t.json > $L/moe-$m-t$t.txt 2>&1
    echo "$m T=$t: $(grep -E '^  (fused|unfused: cub)' $L/moe-$m-t$t.txt | awk '{printf "%s ", $0}' | tr -s ' ')"
  done
done
echo "done ($(($(date +%s) - start)) s)"
