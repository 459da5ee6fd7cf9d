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
# 4. On an H200 only (the machine; none since the twentieth session): the forward against
#    the cuBLAS grouped pipeline on the four shapes, and the saved backward against torch autograd.
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
V=main25
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
B=$(scripts/variants.sh unpack $V gemm_engine_bench) || exit 1
timeout 120 "$T" --gtest_filter='GpuGemmOp.*' > $OUT/gemm-op-tests.txt 2>&1
echo "GpuGemmOp rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/gemm-op-tests.txt | tr '\n' ';') $(el)"
grep -A3 "Failure" $OUT/gemm-op-tests.txt | cut -c1-300 | head -12
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
if [ $g = h200 ]; then
  mkdir -p $OUT/fwd
  for m in qwen3-235b deepseek-v3; do
    for t in 4096 128; do
      f=$OUT/fwd/moe-$m-t$t-w1-$g-25th
      timeout 60 "$K" bench moe --model $m --tokens $t --json $f.json > $f.txt 2>&1
      echo "$m T=$t rc=$? $(grep -E '^  (fused|unfused: cub)' $f.txt | tr -s ' ' | tr '\n' ';') $(el)"
    done
  done
  tar czf $OUT/fwd.tgz -C $OUT fwd && rm -rf $OUT/fwd
  mkdir -p $OUT/bwd
  for m in qwen3-235b deepseek-v3; do
    b=$OUT/bwd/moe-bwd-$m-t4096-w1-$g-25th
    timeout 60 "$K" bench moe --model $m --tokens 4096 --backward --save-activations --dump-routing $OUT/bwd/routing-$m.json --json $b.json > $b.txt 2>&1
    echo "$m bwd rc=$? $(grep -E '^  (un)?fused( backward)? \(' $b.txt | tr -s ' ' | tr '\n' ';') $(el)"
    timeout 90 python3 bench/torch_baselines.py moe --backward --routing $OUT/bwd/routing-$m.json --json $OUT/bwd/torch-moe-bwd-$m-t4096-$g-25th.json > $OUT/bwd/torch-$m.txt 2>&1
    echo "$m torch rc=$? $(grep -iE 'backward|step' $OUT/bwd/torch-$m.txt | tr '\n' ';') $(el)"
  done
  rm -f $OUT/bwd/routing-*.json
  tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/bwd
fi
echo "done $(el)"
