#!/bin/bash
# The thirty-ninth session's device calls (r50 = d22f312, the thirty-eighth session's code; r51 = the
# staged copies: dispatch and the SwiGLU backward stage their rows through shared memory by cp.async).
#   run(command="scripts/call39.sh [STEPS]", carry=["build/variants/r50", "build/variants/r51"])
#   steps in this order:
#     a: `bench moe` A/B, r50 against r51, processes alternated, two rounds (the first with
#        --phase-times: each unfused launch alone, so dispatch and swiglu_backward are timed by
#        themselves): Qwen3 forward, Qwen3 saved backward, DeepSeek-V3 forward, T = 4096;
#     t: r51's whole GPU suite, engine and NCCL tests (new: GpuMoeWideRows.RowsOfTwoStagingChunks).
# Default: a. (Call 1 ran `V=r50 scripts/call38.sh s`.)
. "$(dirname "$0")/device_lib.sh"
device_start
mode=${1:-a}
N=${V:-r51}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    a)
      ROUNDS=${ROUNDS:-2} CASES=${CASES:-"qf:--model,qwen3-235b,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations df:--model,deepseek-v3,--tokens,4096,--skip-cublas"} \
        scripts/variants.sh ab r50 "$N"
      mv $OUT/variants-logs.tgz $OUT/ab.tgz; echo "ab $(el)" ;;
    t) suite_step "$N" ;;
  esac
done
