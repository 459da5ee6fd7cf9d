#!/bin/bash
# ncu of the Qwen3 T = 4096 forward with GEMM2 slot-major and expert-major (the thirty-fourth
# session's pending question: does GEMM2's expert-major order gain through DRAM bytes or L2 hits?).
#   run(command="V=r38 scripts/ncu35.sh", carry=["build/variants/r38"])
. "$(dirname "$0")/device_lib.sh"
device_start
K=$(scripts/variants.sh unpack ${V:-r38} kosmos) || exit 1
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
mkdir -p $OUT/ncu
summary() {
  awk '/persistent_kernel/ && /\(/ {n++}
       /gpu__time_duration.sum/ {d=$NF} /dram__bytes_read.sum/ {r=$NF" "$(NF-1)} /dram__bytes_write.sum/ {w=$NF" "$(NF-1)}
       /lts__t_sector_hit_rate.pct/ {h=$NF} /lts__throughput.avg.pct/ {l=$NF} /lts__t_sectors_srcunit_tex_op_read.sum/ {s=$NF}
       /hmma_cycles_active/ {t=$NF; printf "  #%d %7s ms  tensor %6s %%  L2 %6s %%  L2 sectors %15s  hit %6s %%  DRAM r %s w %s\n", n, d, t, l, s, h, r, w}' "$1"
}
for e in 0 1; do
  timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 8 --metrics $M "$K" bench moe --model qwen3-235b \
    --tokens 4096 --skip-cublas --reps 3 --gemm2-expert-major $e > $OUT/ncu/fwd-g2em$e.txt 2>&1
  echo "== GEMM2 expert-major $e (fused, then the unfused launches: route x2, offsets, dispatch, GEMM1, GEMM2, combine) rc=$? $(el)"
  summary $OUT/ncu/fwd-g2em$e.txt
done
