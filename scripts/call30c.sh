#!/bin/bash
# The thirtieth session's last call: the tests of the suite's shard 2 that call 2 did not reach
# (its 150 s limit ran out in GpuMoePublish, which passed in call 1), with the carry in every launch
# (KOSMOS_RING_CARRY=2 = the new default), then issue 3's dense shapes against cuBLAS with h30 (the
# claim helper in GEMM-only launches).
#   run(command="scripts/call30c.sh", carry=["build/variants/h30"])
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack h30 kosmos_gpu_tests) || exit 1
KOSMOS_RING_CARRY=2 gtest_step tests-shard2-rest 240 "$T" 'AllOps/GpuTp.MatchesFp64AndUnfusedBitForBit/*_W2:Worlds/GpuMoe.MatchesFp64AndUnfusedBitForBit/W1_skewed:Worlds/GpuMoe.MatchesFp64AndUnfusedBitForBit/W8_drops:Worlds/GpuMoeBackward.MatchesFp64AndUnfusedBitForBit/W8_uniform'
[ $(($(date +%s) - start)) -lt 100 ] || { echo "no time for bench gemm $(el)"; exit 0; }
K=$(scripts/variants.sh unpack h30 kosmos) || exit 1
mkdir -p $OUT/gemm
KOSMOS_COMMIT=$(variant_commit h30) timeout 120 "$K" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-30th-h30.json > $OUT/gemm/dense.txt 2>&1
echo "bench gemm rc=$? $(el)"; grep -E 'x|geomean|geometric' $OUT/gemm/dense.txt | tail -12
echo "done $(el)"
