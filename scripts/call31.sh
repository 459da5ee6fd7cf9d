#!/bin/bash
# The thirty-first session's device calls. Ran: `q` (below), on r31 (c285d9b: the thirtieth
# session's final code, the trace gaps, the readiness re-check switch KOSMOS_CLAIM_RECHECK, off) and
# r31d (920dd44: r31 with the dispatch's batched loads); both device changes were then removed
# (docs/perf-notes.md, "Thirty-first session"), so `q` only repeats with those two binaries:
#   run(command="scripts/call31.sh q", carry=["build/variants/r31", "build/variants/r31d"])
# For the next build, packed as (e.g.) r32 with `scripts/variants.sh pack r32`:
#   run(command="V=r32 scripts/call31.sh a", carry=["build/variants/r32"])   the GPU suite, engine, NCCL
#   run(command="V=r32 scripts/call31.sh c", carry=["build/variants/r32"])   the issue tables, issue
#        3's grouped and dense GEMMs, then GEMM2's claim groups at the Qwen3 proxy
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r31d}
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
mode=${1:-a}
if [ "$mode" = q ]; then
  # Quick form for little device time: r31d's MoE and carry tests (four shards), then one round of
  # the A/B (processes alternated, phase times), then the backward traces as far as time goes.
  for i in 0 1 2 3; do
    GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 120 "$T" --gtest_filter='*GpuMoe*:GpuRingCarry.*:GpuGemmOp.RingCarryOffAndOn' > $OUT/tests-q-$i.txt 2>&1 &
  done
  wait
  cat $OUT/tests-q-*.txt | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" | sort | uniq -c | head; echo "tests $(el)"
  KOSMOS_CLAIM_RECHECK=1 gtest_step tests-recheck 60 "$T" 'GpuRingCarry.*'
  CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
    ROUNDS=1 scripts/variants.sh ab r31 $V $V@KOSMOS_CLAIM_RECHECK=1 2>&1
  mv $OUT/variants-logs.tgz $OUT/ab-q.tgz; echo "ab $(el)"
  mkdir -p $OUT/trace
  for c in c2 rk; do
    envs=(); [ $c = rk ] && envs=(KOSMOS_CLAIM_RECHECK=1)
    timeout 40 env "${envs[@]}" "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --reps 3 \
      --trace-svg $OUT/trace/qb-$c.svg > $OUT/trace/qb-$c.txt 2>&1
    echo "== backward $c $(el)"; sed -n '/trace: span/,$p' $OUT/trace/qb-$c.txt | grep -vE "^\s*$" | head -12 | cut -c1-170
  done
  rm -f $OUT/trace/*.svg; tar czf $OUT/trace.tgz -C $OUT trace
  exit 0
fi
case "$mode" in
  a)
    TEST_TIMEOUT=200 scripts/variants.sh tests $V 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
    mv $OUT/results.tgz $OUT/tests-$V.tgz; echo "suite $(el)"
    ;;
  c)
    # The issue tables with the variant (VF, default V), then issue 3's GEMMs.
    VF=${VF:-$V}
    moe_final_form $VF ${TAG:-31st}
    echo "final form $(el)"
    grouped_carry_table $VF ${TAG:-31st}
    [ $(($(date +%s) - start)) -lt 480 ] || { echo "no time for bench gemm $(el)"; tar czf $OUT/gemm.tgz -C $OUT gemm; exit 0; }
    KOSMOS_COMMIT=$(variant_commit $VF) timeout 90 "$(scripts/variants.sh unpack $VF kosmos)" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-${TAG:-31st}.json > $OUT/gemm/dense.txt 2>&1
    echo "bench gemm rc=$? $(el)"; grep -E 'x|geomean|geometric' $OUT/gemm/dense.txt | tail -12
    tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm
    # GEMM2's claim groups at the Qwen3 proxy (two slots per expert; never timed alone).
    [ $(($(date +%s) - start)) -lt 500 ] || { echo "no time for the GEMM2 groups $(el)"; exit 0; }
    mkdir -p $OUT/g2
    moe_rounds "$(scripts/variants.sh unpack $VF kosmos)" 2 $OUT/g2 "q:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times g2:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,2 g3:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--gemm2-group,3"
    tar czf $OUT/g2.tgz -C $OUT g2 && rm -rf $OUT/g2
    echo "done $(el)"
    ;;
esac
