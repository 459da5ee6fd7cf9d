#!/bin/bash
# The twenty-fifth session's sixth device call: does the grouped GEMM's gap come from its B reuse
# pattern (each weight column block read by ~6 row blocks only, so from DRAM), and do 2-CTA clusters
# sharing B close it? A dense problem with the grouped case's reuse: M = 768 (6 row blocks),
# N = 32 x 4096 = 131072 (every expert's gate+up weights side by side), K = 7168 -- the same FLOPs
# and weight bytes as issue 3's grouped gate+up -- timed with the standalone engine plain and with
# --pair-b (clusters of 2 multicasting B), cuBLAS, and kosmos::Gemm (kosmos bench gemm); the
# dense problem of the same rows (24576 x 4096 x 7168, B read by 192 row blocks) as the control.
#   run(command="scripts/call25f.sh", carry=["build/variants/final25"])
# First the engine's kept-operand test (its cases were folded into one list after call 3).
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack final25 gemm_engine_bench) || exit 1
K=$(scripts/variants.sh unpack final25 kosmos) || exit 1
E=$(scripts/variants.sh unpack final25 gemm_engine_test) || exit 1
gtest_step engine-kept 60 "$E" '*KeptOperands*'  # the test's cases folded into one list since call 3
timeout 200 "$B" --dense-only --pair-b --run 1 --reps 20 --shapes 768x131072x7168,24576x4096x7168 --json $OUT/pair-b-reuse.json > $OUT/pair-b-reuse.txt 2>&1
echo "engine --pair-b rc=$? $(el)"; tail -6 $OUT/pair-b-reuse.txt
timeout 200 "$K" bench gemm --layout nt --shapes 768x131072x7168,24576x4096x7168 --json $OUT/bench-gemm-reuse.json > $OUT/bench-gemm-reuse.txt 2>&1
echo "bench gemm rc=$? $(el)"; tail -6 $OUT/bench-gemm-reuse.txt
