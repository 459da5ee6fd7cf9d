#!/bin/bash
# The thirty-ninth session's device calls. r50 = d22f312 (the thirty-eighth session's code; main's
# device code is still r50's). Two branches were built after the session's only device call and
# never GPU-run:
#   r52 = branch staged-copies (220314e): dispatch and the SwiGLU backward stage their rows through
#         shared memory by cp.async; the offsets task's prefix is a scan;
#   r53 = branch wg-store-boxes (05fa905): the GEMM TMA-store epilogue stores one 64 x 64 box per consumer
#         warpgroup and pass (8 stores per 128 x 256 tile where there were 32).
#   run(command="scripts/call39.sh [STEPS]", carry=["build/variants/r50", "build/variants/r52", "build/variants/r53"])
#   steps in this order:
#     a: `bench moe` A/B of r50, r52 and r53, processes alternated, two rounds (the first with
#        --phase-times: each unfused launch alone, so dispatch, offsets, swiglu_backward and the
#        weight gradients are timed by themselves): Qwen3 forward, Qwen3 saved backward, DeepSeek-V3
#        forward at T = 4096, DeepSeek-V3 at T = 128 (where the offsets' ~10 us shows most);
#     t: variant $V's (default r52) whole GPU suite, engine and NCCL tests;
#     g: `bench gemm` (the eight dense shapes against cuBLAS) with r50's and r53's kosmos, twice in
#        alternation: the epilogue's boxes on issue 3's shapes.
# Default: a (~350 s). Next session: `a`, then `V=r52 ... t` and `V=r53 ... tg` as separate calls;
# merge a branch whose suite passes and which gains.
. "$(dirname "$0")/device_lib.sh"
device_start
mode=${1:-a}
N=${V:-r52}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    a) moe_ab r50 r52 r53 ;;
    t) suite_step "$N" ;;
    g) dense_gemm_ab 39th r50 r53 ;;
  esac
done
