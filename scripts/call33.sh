#!/bin/bash
# The thirty-third session's device calls (binary r33c = the session's code with three switches off
# by default: MoeConfig::gemm2_expert_major, backward_expert_major, backward_combine_early).
#   run(command="V=r33c scripts/call33.sh tx", carry=["build/variants/r33c"])
#     t: the whole GPU suite, engine and NCCL tests (GEMM1 expert-major on by default since the
#        thirty-second session; never run whole with it), then the tests of the three switches;
#     x: each switch against the default, the same binary alternated, two rounds: the Qwen3 forward
#        with GEMM2 expert-major, DeepSeek-V3 with GEMM1 expert-major in place of its claim groups of
#        six, the saved backward (both models) with dX expert-major, combine before dGateUp, both.
#   run(command="V=r33c scripts/call33.sh c", carry=["build/variants/r33c"])   the issue tables
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r33c}
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
mode=${1:-tx}
if [[ $mode == *t* ]]; then
  TEST_TIMEOUT=200 scripts/variants.sh tests $V 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
  mv $OUT/results.tgz $OUT/tests-$V.tgz; echo "suite $(el)"
fi
if [[ $mode == *x* ]]; then
  mkdir -p $OUT/x
  Q="--model,qwen3-235b,--tokens,4096"; D="--model,deepseek-v3,--tokens,4096"; B="--backward,--save-activations,--reps,10"
  moe_rounds "$K" 2 $OUT/x "q:$Q,--skip-cublas,--phase-times,--reps,10 q2:$Q,--skip-cublas,--phase-times,--reps,10,--gemm2-expert-major,1 d:$D,--skip-cublas,--reps,10 de:$D,--skip-cublas,--reps,10,--gemm1-run,1,--gemm1-group,1"
  moe_rounds "$K" 2 $OUT/x "qb:$Q,$B qbx:$Q,$B,--bwd-expert-major,1 qbc:$Q,$B,--bwd-combine-early,1 qbxc:$Q,$B,--bwd-expert-major,1,--bwd-combine-early,1 db:$D,$B dbc:$D,$B,--bwd-combine-early,1"
  grep -h "each launch alone" $OUT/x/fwd-q*-*.txt | cut -c1-220
  grep -h "moe_forward\|moe_backward" $OUT/x/fwd-q2-1.txt $OUT/x/fwd-de-1.txt $OUT/x/fwd-qbxc-1.txt | grep -o "expert-major[^;]*\|before dGateUp" | sort | uniq -c
  tar czf $OUT/x.tgz -C $OUT x && rm -rf $OUT/x
  echo "experiments $(el)"
fi
if [[ $mode == *c* ]]; then
  moe_final_form $V ${TAG:-33rd}
  echo "final form $(el)"
fi
