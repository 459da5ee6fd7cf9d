#!/bin/bash
# The thirty-fifth session's device calls. r36 = f06de35: the SwiGLU backward in the dA' tiles'
# epilogue (MoeConfig::backward_swiglu_epilogue, off by default), first version (accumulator-layout
# stores); r38: its third version (16-byte sectors through quad transposes), the GEMM1 rule's join
# counter and the KOSMOS_TRUST_JOIN experiment. All three were removed after steps s and j (their
# commits keep them: build one, `scripts/variants.sh pack r38`, to run n / b / s / j again); steps r
# runs on the final code (r41; packed no longer: use r44, whose device code adds only KOSMOS_DIAG).
#   run(command="V=r36 scripts/call35.sh nbt", carry=["build/variants/r36"])   steps in this order:
#     n: the new GPU test alone (GpuMoeSwigluEpilogue.*: fp64, fused == unfused, saved == recompute);
#     b: the saved backward with the switch against the default, both models, processes alternated
#        (Qwen3 three rounds, DeepSeek-V3 two), then the recomputing backward (Qwen3, one round);
#     f: a trace of the Qwen3 forward beside its launches timed alone (fused loses ~0.1 ms to them);
#     s: r38 (V) against r36 (V1) and the default, then each launch alone, both modes:
#        run(command="V=r38 V1=r36 scripts/call35.sh nsjt", carry=["build/variants/r36", "build/variants/r38"]);
#     j: KOSMOS_TRUST_JOIN=1 against the default (forward both models, Qwen3 saved backward);
#     r: traces of the Qwen3 saved backward and the DeepSeek-V3 forward beside their launches alone
#        (r41 = the session's final code: r35's device code plus the trace's SM clock): V=r41 scripts/call35.sh r;
#     u, t: moved to scripts/call36.sh (ran there in the thirty-sixth session, on r42).
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r41}"
mode=${1:-nbt}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    n)  gtest_step new 240 "$T" 'GpuMoeSwigluEpilogue.*' ;;
    b)
      moe_rounds "$K" 3 $OUT/x "qb:$Q,$B qbe:$Q,$B,--bwd-swiglu-epilogue,1"
      grep -h "moe_backward" $OUT/x/fwd-qbe-1.txt | grep -o "in dA'.s epilogue" | uniq -c
      moe_rounds "$K" 2 $OUT/x "db:$D,$B dbe:$D,$B,--bwd-swiglu-epilogue,1"
      [ $(($(date +%s) - start)) -lt 420 ] && moe_rounds "$K" 1 $OUT/x "qr:$Q,--backward,--reps,10 qre:$Q,--backward,--reps,10,--bwd-swiglu-epilogue,1" ;;
    f)  # where the fused forward loses to its own unfused launches (2.962 vs 2.858 ms in the 35th
        # session's table): the trace's per-label SM time and gaps against each launch alone
      timeout 120 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas --phase-times --reps 10 \
        --trace-svg $OUT/x/fwd-trace.svg > $OUT/x/fwd-trace.txt 2>&1
      echo "trace rc=$? $(el)"; grep -E "alone|^  (un)?fused|SM-ms|gap" $OUT/x/fwd-trace.txt | cut -c1-400 | head -20 ;;
    s)  # the staged epilogue (V) against the first version (V1, accumulator-layout stores) and the
        # default, Qwen3 saved backward, processes alternated, three rounds; then phase times
      K1=$(scripts/variants.sh unpack ${V1:-r36} kosmos) || exit 1
      for round in 1 2 3; do
        for c in "qb:$K:" "qbs:$K:--bwd-swiglu-epilogue 1" "qb1:$K1:--bwd-swiglu-epilogue 1"; do
          tag=${c%%:*}; rest=${c#*:}; bin=${rest%%:*}; extra=${rest#*:}
          # shellcheck disable=SC2086
          timeout 150 "$bin" bench moe ${Q//,/ } ${B//,/ } $extra > $OUT/x/bwd-$tag-$round.txt 2>&1
          echo "$tag r$round: $(moe_times $OUT/x/bwd-$tag-$round.txt) $(el)"
        done
      done
      for e in 0 1; do
        timeout 150 "$K" bench moe ${Q//,/ } ${B//,/ } --phase-times --bwd-swiglu-epilogue $e > $OUT/x/bwd-phases-$e.txt 2>&1
        echo "phases epilogue=$e: $(grep -h "alone" $OUT/x/bwd-phases-$e.txt | cut -c1-300) $(el)"
      done
      moe_rounds "$K" 2 $OUT/x "db:$D,$B dbs:$D,$B,--bwd-swiglu-epilogue,1" ;;
    j)  # KOSMOS_TRUST_JOIN=1 (the in-body waiter trusts the carry's launch-long join bit) against
        # the default, processes alternated: Qwen3 / DeepSeek-V3 forward three rounds, Qwen3 saved
        # backward two
      for round in 1 2 3; do
        for c in "q:0:$Q" "qj:1:$Q" "d:0:$D" "dj:1:$D"; do
          tag=${c%%:*}; rest=${c#*:}; tj=${rest%%:*}; args=${rest#*:}
          KOSMOS_TRUST_JOIN=$tj timeout 150 "$K" bench moe ${args//,/ } --skip-cublas --reps 20 > $OUT/x/j-$tag-$round.txt 2>&1
          echo "$tag r$round: $(moe_times $OUT/x/j-$tag-$round.txt) $(el)"
        done
      done
      for round in 1 2; do
        for tj in 0 1; do
          KOSMOS_TRUST_JOIN=$tj timeout 150 "$K" bench moe ${Q//,/ } ${B//,/ } > $OUT/x/j-qb$tj-$round.txt 2>&1
          echo "qb trust=$tj r$round: $(moe_times $OUT/x/j-qb$tj-$round.txt) $(el)"
        done
      done ;;
    r)  # traces: the saved backward (Qwen3; fused 6.335 vs unfused 6.213 in call 2) and the DeepSeek-V3
        # forward (5.248 vs 5.106), each with its launches alone: where the fused launch loses
      timeout 150 "$K" bench moe ${Q//,/ } ${B//,/ } --phase-times --trace-svg $OUT/x/bwd-trace.svg > $OUT/x/bwd-trace.txt 2>&1
      echo "bwd trace rc=$? $(el)"; grep -v "^\[" $OUT/x/bwd-trace.txt | grep -vE "count  SM-busy|moe_(backward|forward):" | cut -c1-150 | head -45
      timeout 120 "$K" bench moe ${D//,/ } --skip-cublas --phase-times --reps 10 --trace-svg $OUT/x/dfwd-trace.svg > $OUT/x/dfwd-trace.txt 2>&1
      echo "DeepSeek fwd trace rc=$? $(el)"; grep -v "^\[" $OUT/x/dfwd-trace.txt | grep -vE "count  SM-busy|moe_forward:" | cut -c1-150 | head -40 ;;
    # u (--unfused-signals A/B) and t (the suite on r41's code) ran in the thirty-sixth session as
    # scripts/call36.sh's steps u and t.
  esac
  tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
