#!/bin/bash
# The twenty-fifth session's seventh device call: the grouped gate+up's claim orders on the H100.
# Call 5 found the dense problem with the grouped case's B reuse (768 x 131072 x 7168) at 792.6 TF/s
# (0.98x cuBLAS) -- so each weight block being read by few row blocks is not what slows the grouped
# GEMM (597 TF/s, its tiles ~19 % slower each). (1) ncu DRAM bytes / tensor-pipe activity of that
# dense problem, against call 4's grouped numbers; (2) with SWEEP=1, every claim order of the grouped gate+up
# (B [N, K]) through kosmos::Gemm (--raster-sweep), against the planner's choice and its estimate;
# first the grouped case with 32 equal groups of 768 rows (--uniform-groups: no skew, no tails).
# (final25's gemm_engine_bench.xz here is ef068b3's plus --uniform-groups, packed before its commit.)
#   run(command="scripts/call25g.sh", carry=["build/variants/final25"])
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack final25 gemm_engine_bench) || exit 1
K=$(scripts/variants.sh unpack final25 kosmos) || exit 1
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
timeout 90 ncu --clock-control none -k regex:persistent_kernel -c 4 --metrics $M "$K" bench gemm --layout nt --reps 5 \
  --shapes 768x131072x7168 > $OUT/ncu-dense-reuse.txt 2>&1
echo "ncu dense-reuse rc=$? $(el)"; grep -E "gpu__time|dram__bytes|hit_rate|hmma" $OUT/ncu-dense-reuse.txt | head -16
timeout 120 "$B" --grouped-only --layout nt --uniform-groups --reps 20 --json $OUT/grouped-uniform.json > $OUT/grouped-uniform.txt 2>&1
echo "grouped uniform rc=$? $(el)"; grep -A4 "^moe" $OUT/grouped-uniform.txt | cut -c1-160
if [ "${SWEEP:-0}" = 1 ]; then  # (left out of the session's call: too little device time left)
  timeout 240 "$B" --grouped-only --layout nt --reps 5 --raster-sweep 2 --json $OUT/grouped-sweep.json > $OUT/grouped-sweep.txt 2>&1
  echo "sweep rc=$? $(el)"; grep -E "^confirmation" $OUT/grouped-sweep.txt | cut -c1-400; grep -A10 "^claim orders of" $OUT/grouped-sweep.txt
fi
