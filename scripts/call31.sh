#!/bin/bash
# The thirty-first session's device calls, on r31d (the final code of the thirtieth -- the claim
# helper calls claim_next alone, not GPU-run before -- plus the benches' trace gaps, the helper's
# readiness re-check, off by default: KOSMOS_CLAIM_RECHECK=1, and the dispatch's batched loads) and
# r31 (the same without the dispatch change). Three calls, back to back on one machine:
#   run(command="scripts/call31.sh a", carry=["build/variants/r31d"])   the GPU suite, the carry's
#        tests with the re-check
#   run(command="scripts/call31.sh b", carry=["build/variants/r31", "build/variants/r31d"])
#        the A/B of r31, r31d and r31d with the re-check; traces
#   run(command="scripts/call31.sh ab", carry=[both]): a, then b as far as the time goes (~560 s)
#   run(command="VF=r31d scripts/call31.sh c", carry=["build/variants/r31d"])   the issue tables and
#        issue 3's GEMMs with the final variant
# Ran: `q` (the quick form below) only; both device changes were then removed (docs/perf-notes.md,
# "Thirty-first session"). For the next build: pack it (e.g. r32), then `V=r32 scripts/call31.sh a`
# (the suite) and `V=r32 VF=r32 scripts/call31.sh c` (tables, GEMMs); `b` and `q` A/B this session's
# variants.
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
[ "$mode" = ab ] && { "$0" a; [ $(($(date +%s) - start)) -lt 360 ] || { echo "no time for b $(el)"; exit 0; }; mode=b; }
case "$mode" in
  a)
    TEST_TIMEOUT=200 scripts/variants.sh tests $V 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
    mv $OUT/results.tgz $OUT/tests-$V.tgz; echo "suite $(el)"
    echo "done $(el)"
    ;;
  b)
    AB="r31 $V $V@KOSMOS_CLAIM_RECHECK=1"
    CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
      ROUNDS=2 scripts/variants.sh ab $AB 2>&1
    mv $OUT/variants-logs.tgz $OUT/ab-recheck.tgz; echo "ab $(el)"
    # Where the saved backward's time goes, and the gaps before each label's tasks: carry in every
    # launch (the default), in GEMM-only launches, and with the re-check.
    [ $(($(date +%s) - start)) -lt 480 ] || { echo "no time for the traces $(el)"; exit 0; }
    mkdir -p $OUT/trace
    for c in c2 c1 rk; do
      envs=(); [ $c = c1 ] && envs=(KOSMOS_RING_CARRY=1); [ $c = rk ] && envs=(KOSMOS_CLAIM_RECHECK=1)
      timeout 60 env "${envs[@]}" "$K" bench moe --model qwen3-235b --tokens 4096 --backward --save-activations \
        --trace-svg $OUT/trace/qb-$c.svg > $OUT/trace/qb-$c.txt 2>&1
      echo "== backward $c rc=$? $(el)"; sed -n '/trace: span/,$p' $OUT/trace/qb-$c.txt | grep -vE "^\s*$" | head -14 | cut -c1-170
      python3 scripts/trace_gaps.py $OUT/trace/qb-$c.svg 2>&1 | head -8
    done
    # The forward, for comparison (fused 1-2 % slower than its own four launches at T = 4096).
    timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas --trace-svg $OUT/trace/qf.svg > $OUT/trace/qf.txt 2>&1
    echo "== forward rc=$? $(el)"; sed -n '/trace: span/,$p' $OUT/trace/qf.txt | grep -vE "^\s*$" | head -12 | cut -c1-170
    python3 scripts/trace_gaps.py $OUT/trace/qf.svg 2>&1 | head -8
    rm -f $OUT/trace/*.svg
    tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
    echo "done $(el)"
    ;;
  c)
    # The issue tables with the final variant (VF, default r31), then issue 3's GEMMs.
    VF=${VF:-$V}
    moe_final_form $VF 31st
    echo "final form $(el)"
    grouped_carry_table $VF 31st
    [ $(($(date +%s) - start)) -lt 480 ] || { echo "no time for bench gemm $(el)"; tar czf $OUT/gemm.tgz -C $OUT gemm; exit 0; }
    KOSMOS_COMMIT=$(variant_commit $VF) timeout 90 "$(scripts/variants.sh unpack $VF kosmos)" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-31st.json > $OUT/gemm/dense.txt 2>&1
    echo "bench gemm rc=$? $(el)"; grep -E 'x|geomean|geometric' $OUT/gemm/dense.txt | tail -12
    tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm
    echo "done $(el)"
    ;;
esac
