#!/usr/bin/env bash
# Session 14, call 8: the NCCL transport at W = 1 with .gpu scope (new) against .sys (old), the
# MoE forward and backward, alternated, two rounds; then a trace of the new one.
set -uo pipefail
for r in 1 2; do for v in sys gpu; do
  B=build/kosmos; [ $v = sys ] && B=build/kosmos_sys
  BIN=$B MOE_CASES="qwen3-235b:4096 qwen3-235b:4096:bwd deepseek-v3:4096 qwen3-235b:128" CASES="" SKIP_TORCH=1 \
    scripts/run_multigpu_bench.sh 1 $OUT/$v-$r 2>&1 | grep -E "^  (fused|unfused|NCCL)|^== moe" | sed "s/^/$r $v /" | cut -c1-110
done; done
TRACE=1 MOE_CASES="qwen3-235b:4096" CASES="" SKIP_TORCH=1 REPS=5 scripts/run_multigpu_bench.sh 1 $OUT/trace > /dev/null 2>&1
python3 scripts/trace_gaps.py $OUT/trace/moe-nccl-W1-qwen3-235b-t4096.svg | head -3
