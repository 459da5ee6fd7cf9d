#!/bin/bash
# The twenty-fifth session's first device call (main25 = 95fdcc7, the twenty-fourth session's final
# code with its end-of-session review, 88fc662, which never ran on a GPU):
#   run(command="scripts/call25.sh", carry=["build/variants/main25"], kind="nvidia-h200")
# 1. GpuGemmOp.* (the review changed Gemm::plan and the grouped merged-tail test's reference).
# 2. Issue 3's grouped case, B [K, N] and B [N, K] (kosmos::Gemm default / merged, cuBLAS grouped,
#    dense cuBLAS), then torch._grouped_mm on the same group sizes.
# 3. Where the saved backward's tail cost sits: traced Qwen3 T = 4096 saved backward, uniform vs
#    balanced routing (every expert exactly 256 rows: no partial row block, every weight-gradient
#    tile four k blocks), per-phase SM time.
# 4. On an H200 only (the issue's machine; none since the twentieth session): the forward against
#    the cuBLAS grouped pipeline on the four shapes, and the saved backward against torch autograd.
. "$(dirname "$0")/device_lib.sh"
device_start
V=main25
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
B=$(scripts/variants.sh unpack $V gemm_engine_bench) || exit 1
gtest_step gemm-op-tests 120 "$T" 'GpuGemmOp.*'
for l in nn nt; do
  timeout 150 "$B" --grouped-only --layout $l --dump-groups $OUT/grouped-sizes.json --json $OUT/gemm-engine-grouped-$l-$g-25th.json > $OUT/grouped-$l.txt 2>&1
  echo "grouped bench $l rc=$? $(el)"; tail -12 $OUT/grouped-$l.txt
done
timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $OUT/grouped-sizes.json --json $OUT/torch-grouped-mm-$g-25th.json > $OUT/torch-grouped.txt 2>&1
echo "torch grouped rc=$? $(el)"; tail -6 $OUT/torch-grouped.txt
for r in uniform balanced; do
  timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --routing $r \
    --trace-svg $OUT/bwd-trace-$r.svg > $OUT/bwd-trace-$r.txt 2>&1
  echo "trace routing=$r rc=$? $(el)"
  grep -E "^  (un)?fused backward|^  trace:|gemm d|moe_swiglu|combine|dispatch" $OUT/bwd-trace-$r.txt | head -14
done
rm -f $OUT/*.svg
[ $g = h200 ] && moe_final_form $V 25th
echo "done $(el)"
