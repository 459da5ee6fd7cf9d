#!/bin/bash
# The twenty-fifth session's eighth device call: the grouped gate+up / down claimed one group at a
# time. The planner's estimate (gemm_raster.cpp) puts "runs of one slot down M, claimed in groups of
# 6 runs" (6 = slots per group: one expert's tiles, n-major) at 2.46 GB from HBM for 32 equal groups
# of 768 rows, against 3.13 GB for its choice (runs of 1 along N in groups of 8, tied on the
# makespan, so the bytes did not decide); groups of 6 are outside its search (powers of two).
# kosmos::Gemm with that order (--claim-order M,1,6) against the planner's, equal and skewed groups.
#   run(command="scripts/call25h.sh", carry=["build/variants/final25"])
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack final25 gemm_engine_bench) || exit 1
for args in "--uniform-groups" "--uniform-groups --claim-order M,1,6" "--claim-order M,1,6" "--uniform-groups --claim-order M,1,12"; do
  f=$OUT/grouped-$(echo $args | tr -d ' -' | tr ',' '_').txt
  timeout 60 "$B" --grouped-only --layout nt --reps 10 $args > $f 2>&1
  echo "[$args] rc=$? $(el)"; grep -A1 "^moe" $f | grep -E "^moe|separate" | cut -c1-190
done
