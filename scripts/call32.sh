#!/bin/bash
# The thirty-second session's L2 question: are the MoE layer's GEMM phases bound by the L2's
# throughput? The twenty-fifth session's ncu of issue 3's grouped gate+up (bench/logs/variants-25th/
# call4) had our grouped kernel at 83-90 % of the L2's peak throughput with the tensor pipe 76-80 %
# active and 545 M L2 sectors read by the SMs, torch._grouped_mm (2-CTA clusters multicasting B) at
# 77-80 % / 91 % with 384 M. This call asks the same of every phase of the Qwen3 proxy's forward and
# saved backward (the unfused launches of the verification pass, identified by their durations) and
# of the dense problems with the same rows, ncu with free clocks. First, the test that decides it:
# the standalone engine in 2-CTA clusters multicasting B (gemm_engine_bench --pair-b, which until
# now ran only dense problems, whose L2 was at 54-69 %: no gain) on the grouped problem with equal
# groups, against the plain engine in the same order.
#   run(command="V=r32p scripts/call32.sh", carry=["build/variants/r32p"])
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r32p}
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
M=$NCU_METRICS
mkdir -p $OUT/ncu
# First the multicast test on the grouped tiles (equal groups, so a cluster pair never straddles
# two experts): the standalone engine plain vs in 2-CTA clusters sharing B, same static order
# (runs of 1 / 3 slots, groups of 6 runs n-major = one expert's slots per step), then ncu of both.
G=$(scripts/variants.sh unpack $V gemm_engine_bench) || exit 1
for r in 1 3; do
  timeout 120 "$G" --grouped-only --uniform-groups --layout nt --run $r --raster 6 --pair-b --reps 20 > $OUT/ncu/pair-run$r.txt 2>&1
  echo "== pair-b, equal groups, runs of $r rc=$? $(el)"; grep -E "^moe|engine, 2-CTA|as kosmos|dense, same|skipped" $OUT/ncu/pair-run$r.txt | cut -c1-150
done
timeout 120 ncu --clock-control none -k regex:gemm_engine -c 4 --metrics $M "$G" --grouped-only --uniform-groups --layout nt --run 1 --raster 6 \
  --pair-b --reps 5 > $OUT/ncu/pair-ncu.txt 2>&1
echo "== ncu: plain (verify), plain, paired, plain rc=$? $(el)"; ncu_summary $OUT/ncu/pair-ncu.txt
timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics $M "$K" bench moe --model qwen3-235b --tokens 4096 \
  --skip-cublas --reps 3 > $OUT/ncu/fwd.txt 2>&1
echo "== forward (fused, then the unfused launches) rc=$? $(el)"; ncu_summary $OUT/ncu/fwd.txt
timeout 200 ncu --clock-control none -k regex:persistent_kernel -c 7 --metrics $M "$K" bench moe --model qwen3-235b --tokens 4096 \
  --backward --save-activations --reps 3 > $OUT/ncu/bwd.txt 2>&1
echo "== backward (saving forward, fused backward, unfused launches) rc=$? $(el)"; ncu_summary $OUT/ncu/bwd.txt
# Dense problems of the same rows: GEMM1 (32768 x 3072 x 4096), GEMM2 (32768 x 4096 x 1536); ours
# (the runtime's persistent kernel) and cuBLAS's, one rep each after warm-up.
for s in 32768x3072x4096 32768x4096x1536; do
  [ $(($(date +%s) - start)) -lt 200 ] || { echo "no time for dense $s $(el)"; continue; }
  timeout 90 ncu --clock-control none -k regex:"persistent_kernel|nvjet|sm90" --launch-skip 4 -c 2 --metrics $M "$K" bench gemm \
    --shapes $s --reps 5 > $OUT/ncu/dense-$s.txt 2>&1
  echo "== dense $s rc=$? $(el)"; ncu_summary $OUT/ncu/dense-$s.txt
done
# Cross-partition L2 traffic (H100 / H200 L2s are two partitions) of the forward's launches.
[ $(($(date +%s) - start)) -lt 250 ] && timeout 120 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics gpu__time_duration.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors.sum \
  "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas --reps 3 > $OUT/ncu/fwd-fabric.txt 2>&1
echo "== forward, L2 fabric rc=$? $(el)"; grep -E "gpu__time|ltcfabric|lts__t_sectors.sum" $OUT/ncu/fwd-fabric.txt | awk '{print $1, $NF}' | paste - - - | head -10
if [ $(($(date +%s) - start)) -lt 300 ]; then
  timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics $M "$K" bench moe --model deepseek-v3 --tokens 4096 \
    --skip-cublas --reps 3 > $OUT/ncu/fwd-deepseek.txt 2>&1
  echo "== DeepSeek-V3 forward rc=$? $(el)"; ncu_summary $OUT/ncu/fwd-deepseek.txt
fi
tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
echo "done $(el)"
