#!/bin/bash
# The twenty-sixth session's seventh device call: why one group's slots per claim wins with uniform
# operands and ties with normal ones. ncu (free clocks) on the first kosmos::Gemm launches of issue 3's
# grouped case, B [N, K]: the new default (runs of 1 down M, groups of 6) and the former order
# (--claim-order N,2,8), uniform and normal operands: duration, DRAM bytes, L2 hit rate, tensor-pipe
# activity, SM clock.
#   run(command="scripts/call26g.sh", carry=["build/variants/y26"])
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack y26 gemm_engine_bench) || exit 1
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
for d in uniform normal; do
  for co in "" "--claim-order N,2,8"; do
    f=$OUT/ncu-$d-$(echo "x$co" | tr -d ' -' | tr ',' '_').txt
    timeout 150 ncu --clock-control none -k regex:persistent_kernel -c 4 --metrics $M "$B" --grouped-only --layout nt --reps 2 --data $d $co > $f 2>&1
    echo "== $d [$co] rc=$? $(el)"
    grep -E "gpu__time_duration|dram__bytes_read|hit_rate|hmma|per_second" $f | awk '{print $1, $(NF-1), $NF}' | paste - - - - - | head -4
  done
done
echo "done $(el)"
