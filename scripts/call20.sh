#!/bin/bash
# The twentieth session's device call (docs/perf-notes.md, "Twentieth session"): the ring carry's
# correctness (whole GPU suite on the `carry` build, which is main plus the carry), its speed against
# main (bench moe, processes alternated), the route split's speed (--route-chunks 0), and the dense
# GEMM bench with the carry off and on in one binary. Run with carry=["build/variants"] after
# `scripts/variants.sh pack main` and `pack carry`. Steps are skipped when the call's time runs short.
set -u
start=$(date +%s)
left() { echo $((${BUDGET:-570} - ($(date +%s) - start))); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
scripts/variants.sh tests carry > "$OUT/tests-carry.txt" 2>&1
echo "tests rc=$? ($(($(date +%s) - start)) s)"
grep -E "tests passed|tests failed|FAILED|\[  PASSED|\[  FAILED" "$OUT/tests-carry.txt" | sort | uniq -c | head -30
if [ "$(left)" -gt 200 ]; then
  ROUNDS=2 CASES="qfs:--model,qwen3-235b,--tokens,4096,--skip-cublas,--route-chunks,0 dfs:--model,deepseek-v3,--tokens,4096,--skip-cublas,--route-chunks,0 qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
    timeout $(($(left) - 60)) scripts/variants.sh ab main carry@KOSMOS_RING_CARRY=0 carry
  echo "ab done ($(($(date +%s) - start)) s)"
fi
K=/tmp/kosmos-variants/carry/kosmos
for r in 1 2; do
  for c in 0 1; do
    [ "$(left)" -gt 40 ] || break 2
    KOSMOS_RING_CARRY=$c timeout 60 "$K" bench gemm --reps 20 --json "$OUT/gemm-carry$c-r$r.json" > "$OUT/gemm-carry$c-r$r.txt" 2>&1
    echo "bench gemm carry=$c r$r: $(grep -iE 'geomean|geometric' "$OUT/gemm-carry$c-r$r.txt" | head -2 | tr '\n' ' ')"
  done
done
echo "done ($(($(date +%s) - start)) s)"
