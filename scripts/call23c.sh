#!/bin/bash
# NOT RUN: the twenty-third session had too little device time left to start a machine for it.
# The twenty-third session's leftover device time: the DeepSeek-V3 T = 4096 saved backward against
# torch autograd on the same routing and card (main23 binaries):
#   run(command="scripts/call23c.sh", carry=["build/variants/main23"])
set -u
K=$(scripts/variants.sh unpack main23 kosmos) || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
b=$OUT/moe-bwd-deepseek-v3-t4096-w1-$g-23rd
timeout 40 "$K" bench moe --model deepseek-v3 --tokens 4096 --backward --save-activations --dump-routing /tmp/r-ds.json --json $b.json > $b.txt 2>&1
echo "ours rc=$? $(grep -E '^  (un)?fused backward \(' $b.txt | tr -s ' ' | tr '\n' ';')"
timeout 50 python3 bench/torch_baselines.py moe --backward --routing /tmp/r-ds.json --json $OUT/torch-moe-bwd-deepseek-v3-t4096-$g-23rd.json > $OUT/torch-ds.txt 2>&1
echo "torch rc=$? $(grep -E 'backward' $OUT/torch-ds.txt | tr '\n' ';')"
