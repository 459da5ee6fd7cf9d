#!/bin/bash
# The twenty-fifth session's fifth device call: what separates the grouped GEMM from the dense one
# of the same rows (issue 3's grouped case, B [N, K]), measured by ncu (free clocks) on every
# kosmos::Gemm launch of gemm_engine_bench --grouped-only (identified by order and duration:
# verification runs, then per rep: separate tiles, dense of the same rows, merged), and on
# torch._grouped_mm's CUTLASS kernel for the same group sizes.
#   run(command="scripts/call25e.sh", carry=["build/variants/final25"])
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack final25 gemm_engine_bench) || exit 1
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg
timeout 240 ncu --clock-control none -k regex:persistent_kernel -c 16 --metrics $M "$B" --grouped-only --layout nt --reps 2 \
  --dump-groups $OUT/sizes.json > $OUT/ncu-kosmos-grouped.txt 2>&1
echo "ncu kosmos rc=$? $(el)"
grep -E "persistent_kernel|gpu__time_duration|dram__bytes_read|hmma|hit_rate" $OUT/ncu-kosmos-grouped.txt | sed -E 's/void kosmos::runtime::persistent_kernel<[^(]*//' | cut -c1-120 | head -80
timeout 200 ncu --clock-control none -k regex:device_kernel -c 4 --metrics $M python3 bench/torch_baselines.py grouped-gemm \
  --sizes $OUT/sizes.json > $OUT/ncu-torch-grouped.txt 2>&1
echo "ncu torch rc=$? $(el)"
grep -E "gpu__time_duration|dram__bytes_read|hmma|hit_rate" $OUT/ncu-torch-grouped.txt | head -20
