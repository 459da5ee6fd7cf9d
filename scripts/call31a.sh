#!/bin/bash
# Ready for the next session: the final code of the thirtieth (r30, packed with
# `scripts/variants.sh pack r30`; the ring carry in every launch, claimed by the helper warp) on
# whatever card comes -- the GPU suite, the issue tables (MoE forward against the cuBLAS grouped
# pipeline, saved backward against torch autograd), issue 3's dense and grouped GEMMs, then GEMM2's
# claim groups at the Qwen3 proxy (two slots per expert; never timed alone) with phase times, then
# traces of the Qwen3 saved backward with the carry everywhere and in GEMM-only launches.
#   run(command="scripts/call31a.sh", carry=["build/variants/r30"])
. "$(dirname "$0")/device_lib.sh"
device_start
TEST_TIMEOUT=200 scripts/variants.sh tests r30 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-r30.tgz; echo "suite $(el)"
moe_final_form r30 31st
echo "final form $(el)"
K=$(scripts/variants.sh unpack r30 kosmos) || exit 1
mkdir -p $OUT/gemm
KOSMOS_COMMIT=$(variant_commit r30) timeout 120 "$K" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-31st.json > $OUT/gemm/dense.txt 2>&1
echo "bench gemm rc=$? $(grep -iE 'geometric' $OUT/gemm/dense.txt) $(el)"
mv $OUT/gemm $OUT/gemm-dense
grouped_carry_table r30 31st
[ $(($(date +%s) - start)) -lt 480 ] || { echo "no time for the GEMM2 sweep $(el)"; exit 0; }
mkdir -p $OUT/g2
moe_rounds "$K" 2 $OUT/g2 "q:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times g2:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,2 g3:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,3"
for f in $OUT/g2/fwd-*.txt; do echo "$(basename $f): $(grep -h "each launch alone" $f | cut -c1-200)"; done
tar czf $OUT/g2.tgz -C $OUT g2 && rm -rf $OUT/g2
# Why the saved backward does not gain from the carry: traces by task label, carry everywhere (the
# default) against GEMM-only launches.
[ $(($(date +%s) - start)) -lt 540 ] || { echo "no time for the backward traces $(el)"; exit 0; }
mkdir -p $OUT/trace
for c in 2 1; do
  KOSMOS_RING_CARRY=$c timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations \
    --trace-svg $OUT/trace/qb-c$c.svg > $OUT/trace/qb-c$c.txt 2>&1
  echo "== backward, carry $c rc=$? $(el)"; grep -vE "^\s*$" $OUT/trace/qb-c$c.txt | tail -16 | cut -c1-160
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
echo "done $(el)"
