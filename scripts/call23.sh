#!/bin/bash
# RECORD ONLY: ran in the twenty-third session on the kstep binaries (cea81b1). The short last k
# block it measures was removed after it (no gain: docs/perf-notes.md, twenty-third session), so
# main's bench moe no longer has --short-last-k.
# The twenty-third session's device call (kstep binaries = main at cea81b1; the op kernel's split
# into two translation units came after and changes no code):
#   run(command="scripts/call23.sh", carry=["build/variants/kstep"], kind="nvidia-h200")
# 1. The short last k block where the padding is a larger share than in the Qwen3 T = 4096 backward
#    (measured ~0 there): DeepSeek-V3 T = 4096 (~128 rows per local expert) and Qwen3 T = 128
#    (~8 rows per expert), saved backward, --short-last-k 0 / 1 alternated, two rounds.
# 2. The final form against the cuBLAS grouped pipeline (Qwen3 / DeepSeek-V3, T = 4096 / 128) and
#    --merge-tails 1 / 0 on the Qwen3 T = 4096 forward: on an H200 these are the numbers.
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
D="--model,deepseek-v3,--tokens,4096,--backward,--save-activations"
Q="--model,qwen3-235b,--tokens,128,--backward,--save-activations"
ROUNDS=2 CASES="db:$D,--short-last-k,0 dbs:$D,--short-last-k,1 q128b:$Q,--short-last-k,0 q128bs:$Q,--short-last-k,1" \
  timeout 200 scripts/variants.sh ab kstep
mv $OUT/variants-logs.tgz $OUT/ab-kstep.tgz
echo "ab short-last-k done $(el)"
K=$(scripts/variants.sh unpack kstep kosmos) || exit 1
g=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
mkdir -p $OUT/fwd
for m in qwen3-235b deepseek-v3; do
  for t in 4096 128; do
    f=$OUT/fwd/moe-$m-t$t-w1-$g-23rd
    timeout 60 "$K" bench moe --model $m --tokens $t --json $f.json > $f.txt 2>&1
    echo "$m T=$t rc=$? $(grep -E '^  (fused|unfused: cub)' $f.txt | tr -s ' ' | tr '\n' ';') $(el)"
  done
done
tar czf $OUT/fwd.tgz -C $OUT fwd && rm -rf $OUT/fwd
ROUNDS=2 CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas,--merge-tails,1 qf0:--model,qwen3-235b,--tokens,4096,--skip-cublas,--merge-tails,0" \
  timeout 150 scripts/variants.sh ab kstep
echo "ab merge-tails done $(el)"
# 3. The backward against torch autograd on the same machine and routing (Qwen3 T = 4096, saved).
mkdir -p $OUT/bwd
b=$OUT/bwd/moe-bwd-qwen3-235b-t4096-w1-$g-23rd
timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --dump-routing $OUT/bwd/routing.json --json $b.json > $b.txt 2>&1
echo "qwen3 bwd rc=$? $(grep -E '^  (un)?fused( backward)? \(' $b.txt | tr -s ' ' | tr '\n' ';') $(el)"
timeout 120 python3 bench/torch_baselines.py moe --backward --routing $OUT/bwd/routing.json --json $OUT/bwd/torch-moe-bwd-qwen3-235b-t4096-$g-23rd.json > $OUT/bwd/torch.txt 2>&1
echo "torch rc=$? $(tail -4 $OUT/bwd/torch.txt | tr '\n' ';') $(el)"
tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/bwd
