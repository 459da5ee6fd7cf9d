#!/bin/bash
# The thirty-fifth session's device calls (binary r36 = the session's code: the SwiGLU backward in
# the dA' tiles' epilogue, MoeConfig::backward_swiglu_epilogue, off by default until measured).
#   run(command="V=r36 scripts/call35.sh nbt", carry=["build/variants/r36"])   steps in this order:
#     n: the new GPU test alone (GpuMoeSwigluEpilogue.*: fp64, fused == unfused, saved == recompute);
#     b: the saved backward with the switch against the default, both models, processes alternated
#        (Qwen3 three rounds, DeepSeek-V3 two), then the recomputing backward (Qwen3, one round);
#     f: a trace of the Qwen3 forward beside its launches timed alone (fused loses ~0.1 ms to them);
#     t: the whole GPU suite, engine and NCCL tests (the dispatch now zeroes recv_x / recv_dy padding
#        rows and combine sums partials: every backward test runs that code, switch on or off).
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r36}
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
mode=${1:-nbt}
Q="--model,qwen3-235b,--tokens,4096"; D="--model,deepseek-v3,--tokens,4096"; B="--backward,--save-activations,--reps,10"
mkdir -p $OUT/x
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
    t)
      TEST_TIMEOUT=${TEST_TIMEOUT:-300} scripts/variants.sh tests $V 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
      mv $OUT/results.tgz $OUT/tests-$V.tgz; echo "suite $(el)" ;;
  esac
  tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
