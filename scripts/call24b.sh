#!/bin/bash
# The twenty-fourth session's second device call (tails24b = tails24 + kosmos::Gemm merging grouped
# tails + the backward merge test's CTA count fixed):
#   run(command="scripts/call24b.sh", carry=["build/variants/tails24b"])
# 1. GpuMoeMergedTails (its backward cases now plan 128 x 256 dA' / dX tiles, so they merge).
# 2. Where the merged backward's time goes: traced Qwen3 T = 4096 saved backward, --merge-tails 1 / 0.
# 3. Issue 3's grouped case (32 DeepSeek-V3 experts, 24,588 rows): kosmos::Gemm merged / not,
#    cuBLAS grouped, dense cuBLAS (gemm_engine_bench --grouped-only), then torch._grouped_mm on the
#    same group sizes.
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
T=$(scripts/variants.sh unpack tails24b kosmos_gpu_tests) || exit 1
K=$(scripts/variants.sh unpack tails24b kosmos) || exit 1
B=$(scripts/variants.sh unpack tails24b gemm_engine_bench) || exit 1
timeout 120 "$T" --gtest_filter='GpuMoeMergedTails.*' > $OUT/moe-merged-test.txt 2>&1
echo "GpuMoeMergedTails rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/moe-merged-test.txt | tr '\n' ';') $(el)"
grep -A3 "Failure" $OUT/moe-merged-test.txt | cut -c1-300 | head -12
for m in 1 0; do
  timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --merge-tails $m \
    --trace-svg $OUT/bwd-trace-m$m.svg > $OUT/bwd-trace-m$m.txt 2>&1
  echo "trace merge=$m rc=$? $(el)"
  grep -E "^  (un)?fused backward|^  trace:|gemm d|moe_swiglu" $OUT/bwd-trace-m$m.txt | head -12
done
rm -f $OUT/*.svg
timeout 200 "$B" --grouped-only --dump-groups $OUT/grouped-sizes.json --json $OUT/gemm-engine-grouped-$g-24th.json > $OUT/grouped.txt 2>&1
echo "grouped bench rc=$? $(el)"; tail -14 $OUT/grouped.txt
timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $OUT/grouped-sizes.json --json $OUT/torch-grouped-mm-$g-24th.json > $OUT/torch-grouped.txt 2>&1
echo "torch grouped rc=$? $(el)"; tail -6 $OUT/torch-grouped.txt
