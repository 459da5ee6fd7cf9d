#!/bin/bash
# The thirty-ninth session's device calls (r50 = d22f312, the thirty-eighth session's code, the
# device code main still has; r52 = branch staged-copies: dispatch and the SwiGLU backward stage their
# rows through shared memory by cp.async, and the offsets task's prefix is a scan -- never GPU-run).
#   run(command="scripts/call39.sh [STEPS]", carry=["build/variants/r50", "build/variants/r52"])
#   steps in this order:
#     a: `bench moe` A/B, r50 against r52, processes alternated, two rounds (the first with
#        --phase-times: each unfused launch alone, so dispatch, offsets and swiglu_backward are timed
#        by themselves): Qwen3 forward, Qwen3 saved backward, DeepSeek-V3 forward at T = 4096, and
#        DeepSeek-V3 at T = 128 (where the offsets' ~10 us shows most);
#     t: r52's whole GPU suite, engine and NCCL tests (new: GpuMoeWideRows.RowsOfTwoStagingChunks).
# Default: at. The session's call 1 ran `V=r50 scripts/call38.sh s`; no device came after that, so
# the next session: run(command="scripts/call39.sh at", carry=["build/variants/r50",
# "build/variants/r52"]) -- if r52 passes and gains, merge branch staged-copies.
. "$(dirname "$0")/device_lib.sh"
device_start
mode=${1:-at}
N=${V:-r52}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    a)
      ROUNDS=${ROUNDS:-2} CASES=${CASES:-"qf:--model,qwen3-235b,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations df:--model,deepseek-v3,--tokens,4096,--skip-cublas d128:--model,deepseek-v3,--tokens,128,--skip-cublas"} \
        scripts/variants.sh ab r50 "$N"
      mv $OUT/variants-logs.tgz $OUT/ab.tgz; echo "ab $(el)" ;;
    t) suite_step "$N" ;;
  esac
done
