#!/bin/bash
# RECORD ONLY: ran in the twenty-fourth session on a binary whose feature was then removed
# (docs/perf-notes.md, twenty-fourth session); on main the switches it A/Bs no longer mean that.
# The twenty-fourth session's third device call (dwmix = main after the backward merge's removal,
# with kosmos::Gemm merging grouped B [K, N] tails and the --dw-interleave claim-order knob, off):
#   run(command="scripts/call24c.sh", carry=["build/variants/dwmix"])
# 1. The saved backward with --dw-interleave 0 / 1 (Qwen3 and DeepSeek-V3 T = 4096), two rounds
#    alternated, phase times in round 1; one traced run of each order (per-label spans).
# 2. Issue 3's grouped case with B [K, N] (--layout nn): kosmos::Gemm merged / not.
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
K=$(scripts/variants.sh unpack dwmix kosmos) || exit 1
B=$(scripts/variants.sh unpack dwmix gemm_engine_bench) || exit 1
Q="--model,qwen3-235b,--tokens,4096,--backward,--save-activations"
D="--model,deepseek-v3,--tokens,4096,--backward,--save-activations"
ROUNDS=2 CASES="qb0:$Q,--dw-interleave,0 qb1:$Q,--dw-interleave,1 db0:$D,--dw-interleave,0 db1:$D,--dw-interleave,1" \
  timeout 300 scripts/variants.sh ab dwmix
mv $OUT/variants-logs.tgz $OUT/ab-dwmix.tgz
echo "ab done $(el)"
for i in 1 0; do
  timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --dw-interleave $i \
    --trace-svg $OUT/t.svg > $OUT/bwd-trace-i$i.txt 2>&1
  echo "trace interleave=$i rc=$? $(el)"
  grep -E "^  (un)?fused backward|gemm d|moe_swiglu" $OUT/bwd-trace-i$i.txt | head -7
done
rm -f $OUT/t.svg
timeout 150 "$B" --grouped-only --layout nn --json $OUT/gemm-engine-grouped-nn-$g-24th.json > $OUT/grouped-nn.txt 2>&1
echo "grouped nn rc=$? $(el)"; tail -9 $OUT/grouped-nn.txt
