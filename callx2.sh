#!/usr/bin/env bash
# Two H200s: issue 5's MoE bench (+ torch EP) and one TP case at W = 2, then the multigpu tests.
set -u
w=/tmp/m2; mkdir -p $w
nvidia-smi -L | tee $w/gpus.txt
pack() { (cd $w && tar czf $OUT/x2.tgz .); }
echo "=== bench W=2 $(date +%T)"
CASES="llama3-70b:ag_gemm" MOE_CASES="qwen3-235b:4096 qwen3-235b:4096:bwd deepseek-v3:4096" REPS=10 \
  timeout 300 scripts/run_multigpu_bench.sh 2 $w/bench > $w/bench.log 2>&1; echo "rc=$?"
grep -vE "^\s+(moe_|keys|pipeline:|ag_gemm W=|  [a-z_]+ W=)" $w/bench.log | grep -vE "^\s*$" | head -70
pack
echo "=== multigpu tests $(date +%T)"
timeout 110 scripts/run_multigpu.sh > $w/tests.log 2>&1; echo "rc=$?"
grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED)|==|W=" $w/tests.log | tail -40
pack; ls -la $OUT
