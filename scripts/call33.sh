#!/bin/bash
# The thirty-third session's device calls (binary r33c = the session's code with three switches off
# by default: MoeConfig::gemm2_expert_major, backward_expert_major, backward_combine_early).
#   run(command="V=r33c scripts/call33.sh btf", carry=["build/variants/r33c"])   steps in this order:
#     b: the saved backward (both models) with dX expert-major, with combine before dGateUp, against
#        the default, the same binary alternated, two rounds;
#     t: the whole GPU suite, engine and NCCL tests (GEMM1 expert-major on by default since the
#        thirty-second session; never run whole with it; the three switches' tests among them);
#     f: the Qwen3 forward with GEMM2 expert-major, then (time permitting) both backward switches
#        together and DeepSeek-V3 with GEMM1 expert-major in place of its claim groups of six.
#     q: b's Qwen3 half alone (little device time);
#   run(command="V=r33c scripts/call33.sh c", carry=["build/variants/r33c"])   the issue tables
# Thirty-fourth session: ran with r34 (7019e4d) as `tq` (the suite's shard limit was then 200 s, one
# shard needed ~215 s; now 300 s, TEST_TIMEOUT overrides). Next: a binary with the new defaults
# (GEMM2 and dX expert-major on), `V=r35 scripts/call33.sh t`, then `c`: both ran in the
# thirty-fifth session. Its final binary r41 has the same device code (plus a per-task clock in the trace).
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r41}"
mode=${1:-btf}
# The steps in the order of the mode's letters (device time is short: the most wanted first).
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    t)  # the whole GPU suite, engine and NCCL tests
      suite_step "$V" ;;
    q)  # the short form of b: the Qwen3 proxy only
      moe_rounds "$K" 2 $OUT/x "qb:$Q,$B qbx:$Q,$B,--bwd-expert-major,1 qbc:$Q,$B,--bwd-combine-early,1" ;;
    b)  # the saved backward: dX expert-major, combine before dGateUp
      moe_rounds "$K" 2 $OUT/x "qb:$Q,$B qbx:$Q,$B,--bwd-expert-major,1 qbc:$Q,$B,--bwd-combine-early,1 db:$D,$B dbc:$D,$B,--bwd-combine-early,1"
      grep -h "moe_backward" $OUT/x/fwd-qbx-1.txt $OUT/x/fwd-qbc-1.txt | grep -o "dX expert-major\|before dGateUp" | sort | uniq -c ;;
    f)  # the forward: GEMM2 expert-major; DeepSeek-V3 with GEMM1 expert-major
      moe_rounds "$K" 2 $OUT/x "q:$Q,--skip-cublas,--phase-times,--reps,10 q2:$Q,--skip-cublas,--phase-times,--reps,10,--gemm2-expert-major,1"
      grep -h "each launch alone" $OUT/x/fwd-q*-*.txt | cut -c1-220
      grep -h "moe_forward" $OUT/x/fwd-q2-1.txt | grep -o "GEMM2 expert-major" | uniq -c
      [ $(($(date +%s) - start)) -lt 400 ] && moe_rounds "$K" 2 $OUT/x "qbxc:$Q,$B,--bwd-expert-major,1,--bwd-combine-early,1 d:$D,--skip-cublas,--reps,10 de:$D,--skip-cublas,--reps,10,--gemm1-run,1,--gemm1-group,1" ;;
    c)  # the issue tables
      moe_final_form $V ${TAG:-33rd}
      echo "final form $(el)" ;;
  esac
  tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
