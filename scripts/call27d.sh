#!/bin/bash
# The twenty-seventh session's fourth device call (c27d: the early ticket's atomic not waited for
# in the k-loop). Final code: GPU suite, engine and NCCL tests; issue 3's grouped and dense tables
# with --compare-carry; torch._grouped_mm; the MoE final form.
#   run(command="scripts/call27d.sh", carry=["build/variants/c27d"])
. "$(dirname "$0")/device_lib.sh"
device_start
grouped_carry_table c27d 27th
B=$(scripts/variants.sh unpack c27d gemm_engine_bench) || exit 1
timeout 110 "$B" --dense-only --reps 10 --compare-carry --json $OUT/gemm/gemm-engine-dense-$g-27th.json > $OUT/gemm/dense.txt 2>&1
echo "dense rc=$? $(el)"; grep -E "geomean|^ +[0-9.]+ TF/s .*(default:|carry)" $OUT/gemm/dense.txt | cut -c1-100 | head -30
tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm
scripts/variants.sh tests c27d 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-c27d.tgz; echo "tests $(el)"
moe_final_form c27d 27th
echo "final form $(el)"
