#!/usr/bin/env bash
# session-5 device call 7 (temporary; not committed): final full suite + data for the next session
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/r.tgz -C $O . ; }
OUT=$O/t scripts/device_batch.sh info gpu-tests nccl-tests 2>&1 | grep -E "PASSED|FAILED|==========|Failure" | tail -20; pack
moe() { tag=$1; shift; echo "== moe $tag"; build/kosmos bench moe --skip-cublas --reps 10 --json $O/moe-$tag.json "$@" 2>&1 | grep -E "^  (fused|unfused)|^  [a-z].*[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+$|trace:"; }
for r in 0 2 4; do moe q4096-run$r --model qwen3-235b --tokens 4096 --gemm1-run $r; done
moe ds4096b-trace --model deepseek-v3 --tokens 4096 --backward --trace-svg $O/trace-moe-backward-ds-t4096.svg
pack
