#!/bin/bash
# The thirty-sixth session's device calls (r42 = 854cc46: r41's device code -- r35's plus the trace's
# SM clock per task -- and the traces' CSV beside each SVG).
#   run(command="V=r42 scripts/call36.sh rut", carry=["build/variants/r42"])   steps in this order:
#     r: traces of the DeepSeek-V3 forward and the Qwen3 saved backward (fused, then each unfused
#        launch), the breakdown with SM MHz per label, and scripts/trace_windows.py over the CSVs:
#        are the fused launch's GEMM tiles slower throughout, or where other labels share the SMs,
#        and at which clock?
#     u: the unfused launches with the fused plan's signals kept (--unfused-signals) against the plain
#        ones: does the release cost the fused tiles their extra 3-12 %?
#     t: the whole GPU suite, engine and NCCL tests (the trace record grew to 40 bytes).
#     s: r43 (9c5e1a0+: the bench's trace first prints what the last timed runs left, fused and each
#        unfused launch under the timing's alternation): the SM clock and cycles per label in the
#        steady state, DeepSeek-V3 forward, Qwen3 forward and saved backward (no --phase-times, so
#        the unfused launches' last runs are the alternated ones):
#        run(command="V=r44 scripts/call36.sh sw", carry=["build/variants/r44"]) (r44 = r43 + KOSMOS_DIAG)
#     w: KOSMOS_DIAG=1 (r44+) against --unfused-signals alone and the plain composition (the write
#        wait's share of the release), Qwen3 saved backward three rounds, DeepSeek-V3 forward two;
#     m: r45 (--unfused-merge-gemms): run(command="V=r45 scripts/call36.sh msw", carry=["build/variants/r45"])
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r42}"
mode=${1:-rut}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    r)
      for c in "dfwd:$D,--skip-cublas,--reps,10" "bwd:$Q,$B"; do
        tag=${c%%:*}; args=${c#*:}
        # shellcheck disable=SC2086
        timeout 150 "$K" bench moe ${args//,/ } --phase-times --trace-svg $OUT/x/$tag-trace.svg > $OUT/x/$tag-trace.txt 2>&1
        echo "$tag trace rc=$? $(el)"
        grep -v "^\[" $OUT/x/$tag-trace.txt | grep -vE "count  SM-busy|moe_(backward|forward):" | cut -c1-160 | head -45
        python3 scripts/trace_windows.py $OUT/x/$tag-trace.svg.csv --windows 8 > $OUT/x/$tag-windows.txt 2>&1
        cut -c1-230 $OUT/x/$tag-windows.txt
        rm -f $OUT/x/$tag-trace.svg
        gzip -f $OUT/x/$tag-trace.svg.csv
      done ;;
    s)
      for c in ${S_CASES:-"sd:$D,--skip-cublas,--reps,20" "sq:$Q,--skip-cublas,--reps,20" "sqb:$Q,$B"}; do
        tag=${c%%:*}; args=${c#*:}
        # shellcheck disable=SC2086
        timeout 150 "$K" bench moe ${args//,/ } --trace-svg $OUT/x/$tag-trace.svg > $OUT/x/$tag-trace.txt 2>&1
        echo "$tag rc=$? $(el)"
        grep -E "^  (fused|unfused)|the last timed|one more fused|^  unfused launch|^  gemm|^  moe_(dispatch|combine|swiglu)" $OUT/x/$tag-trace.txt | cut -c1-160
        python3 scripts/trace_windows.py $OUT/x/$tag-trace.svg.csv --windows 6 > $OUT/x/$tag-windows.txt 2>&1
        rm -f $OUT/x/$tag-trace.svg
        gzip -f $OUT/x/$tag-trace.svg.csv
      done ;;
    w)  # r44: does the write wait cost the unfused launches with signals kept? (KOSMOS_DIAG=1: a GEMM
        # tile with signals waits only for its stores' reads; safe there, no task of those launches
        # waits) -- the release's two parts, the write wait and the atomics
      moe_rounds "$K" "${W_ROUNDS:-3}" $OUT/x "qb:$Q,$B qbs:$Q,$B,--unfused-signals qbsw@KOSMOS_DIAG=1:$Q,$B,--unfused-signals"
      [ -n "${W_QWEN_ONLY:-}" ] || moe_rounds "$K" 2 $OUT/x "d:$D,--skip-cublas,--reps,20 ds:$D,--skip-cublas,--reps,20,--unfused-signals dsw@KOSMOS_DIAG=1:$D,--skip-cublas,--reps,20,--unfused-signals" ;;
    m)  # r45: is DeepSeek-V3's fused GEMM1 10 % slower in cycles because of dispatch's presence or
        # the GEMMs' own waits and signals? --unfused-merge-gemms runs GEMM1 + GEMM2 as one launch
        # with the fused plan's waits and signals between them (no dispatch, no combine); its trace
        # against the fused launch's and the plain GEMM1 launch's, then two alternated rounds
      for c in "md:$D,--skip-cublas,--reps,20,--unfused-merge-gemms" "mq:$Q,--skip-cublas,--reps,20,--unfused-merge-gemms"; do
        tag=${c%%:*}; args=${c#*:}
        # shellcheck disable=SC2086
        timeout 150 "$K" bench moe ${args//,/ } --trace-svg $OUT/x/$tag-trace.svg > $OUT/x/$tag-trace.txt 2>&1
        echo "$tag rc=$? $(el)"
        grep -E "^  (fused|unfused)|the last timed|^  gemm" $OUT/x/$tag-trace.txt | head -12 | cut -c1-160
        rm -f $OUT/x/$tag-trace.svg
        gzip -f $OUT/x/$tag-trace.svg.csv
      done
      moe_rounds "$K" 2 $OUT/x "d:$D,--skip-cublas,--reps,20 dm:$D,--skip-cublas,--reps,20,--unfused-merge-gemms" ;;
    u)
      moe_rounds "$K" 2 $OUT/x "d:$D,--skip-cublas,--reps,20 ds:$D,--skip-cublas,--reps,20,--unfused-signals qb:$Q,$B qbs:$Q,$B,--unfused-signals" ;;
    t)
      suite_step "$V" ;;
  esac
  tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
