#!/bin/bash
# The fortieth session's device calls. r50 = d22f312 (main's device code since the thirty-eighth
# session). The thirty-ninth session's two branches were lost with its checkout and rebuilt:
#   r52 = branch staged-copies: dispatch and the SwiGLU backward stage their rows through shared
#         memory by cp.async; the offsets task's prefix is a warp scan;
#   r53 = branch wg-store-boxes: the GEMM TMA-store epilogue stores one 64 x 64 box per consumer
#         warpgroup and pass (8 stores per 128 x 256 tile where there were 32).
#   run(command="V=r50 scripts/call40.sh cg", carry=["build/variants/r50"])          on an H200
#   run(command="scripts/call40.sh ab", carry=["build/variants/r50/kosmos.xz", "build/variants/r52/kosmos.xz",
#       "build/variants/r53/kosmos.xz", "build/variants/r50/commit.txt", "build/variants/r53/commit.txt"])
#       (three whole variants and the tree exceed the 64 MiB a call may carry; a and b need only kosmos)
#   Ran (H100): `ROUNDS=1 ... a` three times and `V=r53 ... t` (bench/logs/variants-40th). Next:
#   r54 = branch offsets-scan: `V=r54 scripts/call40.sh t`, then `AB="r50 r54" ROUNDS=3 ... a`.
#   steps in this order:
#     c: the issue-5 tables with $V's kosmos (forward T = 4096 / 128 both models against the cuBLAS
#        grouped pipeline, saved backward against torch autograd; JSON tagged $TAG, default 40th);
#     g: the issue-3 tables with $V: grouped (B [N, K] and [K, N], carry on / off) against
#        torch._grouped_mm on the same group sizes, then `bench gemm` (eight dense shapes vs cuBLAS);
#     a: `bench moe` A/B of $AB (default r50 r52 r53), processes alternated, two rounds (the first with
#        --phase-times): Qwen3 forward, Qwen3 saved backward, DeepSeek-V3 forward at T = 4096,
#        DeepSeek-V3 at T = 128;
#     t: variant $V's whole GPU suite, engine and NCCL tests (V may list several: "r52 r53");
#     b: `bench gemm` with r50's and r53's kosmos, twice in alternation.
# A step starts only while the call has time left for it (step_limit: the latest start, seconds).
. "$(dirname "$0")/device_lib.sh"
device_start
mode=${1:-a}
V=${V:-r50}
TAG=${TAG:-40th}
declare -A step_limit=([c]=300 [g]=420 [a]=${A_LIMIT:-240} [t]=380 [b]=480)
for ((i = 0; i < ${#mode}; ++i)); do
  s=${mode:i:1}
  [ $(($(date +%s) - start)) -lt "${step_limit[$s]:-600}" ] || { echo "no time for step $s $(el)"; continue; }
  case $s in
    c) moe_final_form "$V" "$TAG"; echo "final form $(el)" ;;
    g) issue3_tables "$V" "$TAG" ;;
    # shellcheck disable=SC2086
    a) moe_ab ${AB:-r50 r52 r53} ;;
    t) for v in $V; do suite_step "$v"; done ;;
    b) dense_gemm_ab "$TAG" r50 r53 ;;
  esac
done
