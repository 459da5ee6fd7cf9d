#!/bin/bash
# The twenty-fourth session's last device call: final24b (kosmos::Gemm's merged tails opt-in; the
# grouped bench times the merged plan against the default):
#   run(command="scripts/call24e.sh", carry=["build/variants/final24b"])
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
T=$(scripts/variants.sh unpack final24b kosmos_gpu_tests) || exit 1
B=$(scripts/variants.sh unpack final24b gemm_engine_bench) || exit 1
timeout 120 "$T" --gtest_filter='GpuGemmOp.*' > $OUT/gemm-op-tests.txt 2>&1
echo "GpuGemmOp rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/gemm-op-tests.txt | tr '\n' ';') $(el)"
for l in nn nt; do
  timeout 100 "$B" --grouped-only --layout $l --json $OUT/gemm-engine-grouped-$l-$g-24th-final.json > $OUT/grouped-$l.txt 2>&1
  echo "grouped $l rc=$? $(el)"; tail -9 $OUT/grouped-$l.txt
done
