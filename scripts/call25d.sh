#!/bin/bash
# The twenty-fifth session's fourth device call (final25; meant for an H200, the machine,
# none of which was lent from the twenty-first to the twenty-fourth session):
#   run(command="scripts/call25d.sh", carry=["build/variants/final25"])
# The forward against the cuBLAS grouped pipeline on the four shapes (Qwen3 / DeepSeek-V3,
# T = 4096 / 128) and the saved backward against torch autograd on the same routing (T = 4096).
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
K=$(scripts/variants.sh unpack final25 kosmos) || exit 1
mkdir -p $OUT/fwd $OUT/bwd
for m in qwen3-235b deepseek-v3; do
  for t in 4096 128; do
    f=$OUT/fwd/moe-$m-t$t-w1-$g-25th
    timeout 60 "$K" bench moe --model $m --tokens $t --json $f.json > $f.txt 2>&1
    echo "$m T=$t rc=$? $(grep -E '^  (fused|unfused: cub)' $f.txt | tr -s ' ' | tr '\n' ';') $(el)"
  done
done
for m in qwen3-235b deepseek-v3; do
  b=$OUT/bwd/moe-bwd-$m-t4096-w1-$g-25th
  timeout 60 "$K" bench moe --model $m --tokens 4096 --backward --save-activations --dump-routing $OUT/bwd/routing-$m.json --json $b.json > $b.txt 2>&1
  echo "$m bwd rc=$? $(grep -E '^  (un)?fused( backward)? \(|training step' $b.txt | tr -s ' ' | tr '\n' ';') $(el)"
  timeout 90 python3 bench/torch_baselines.py moe --backward --routing $OUT/bwd/routing-$m.json --json $OUT/bwd/torch-moe-bwd-$m-t4096-$g-25th.json > $OUT/bwd/torch-$m.txt 2>&1
  echo "$m torch rc=$? $(grep -iE 'backward|step' $OUT/bwd/torch-$m.txt | tr '\n' ';') $(el)"
done
rm -f $OUT/bwd/routing-*.json
tar czf $OUT/fwd.tgz -C $OUT fwd && tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/fwd $OUT/bwd
echo "done $(el)"
