#!/bin/bash
# Is the fused launch's GEMM tile slower than its own launch's because the SM clock is lower?
# ncu (free clocks) of the DeepSeek-V3 and Qwen3 T = 4096 forwards: each persistent launch's
# duration, SM clock and tensor-pipe activity (the unfused launches, then the fused one).
#   run(command="V=r41 scripts/clock35.sh", carry=["build/variants/r41"])  (ran with r39 = ec23734)
. "$(dirname "$0")/device_lib.sh"
device_start
K=$(scripts/variants.sh unpack ${V:-r41} kosmos) || exit 1
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.sum,dram__bytes_read.sum
mkdir -p $OUT/ncu
for m in deepseek-v3 qwen3-235b; do
  timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics $M "$K" bench moe --model $m \
    --tokens 4096 --skip-cublas --reps 3 > $OUT/ncu/clock-$m.txt 2>&1
  echo "== $m rc=$? $(el)"
  awk '/persistent_kernel/ && /\(/ {n++} /gpu__time_duration.sum/ {d=$(NF-1)" "$NF} /sm__cycles_elapsed.avg.per_second/ {c=$(NF-1)" "$NF}
       /dram__bytes_read.sum/ {r=$(NF-1)" "$NF} /hmma_cycles_active.avg.pct/ {t=$NF}
       /hmma_cycles_active.sum/ {h=$NF; printf "  #%d %s  clock %s  tensor %s %%  hmma cycles %s  DRAM r %s\n", n, d, c, t, h, r}' $OUT/ncu/clock-$m.txt
done
