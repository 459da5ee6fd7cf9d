#!/bin/bash
# The thirty-seventh session's device calls (r46 = 0599ff6: r45 = e8358e0, the thirty-sixth session's final code,
# with gemm_engine_bench's --equal-groups and --grouped-cases; r45's device code -- the KOSMOS_DIAG bit, trace stamps only when tracing -- never GPU-run).
#   run(command="V=r46 scripts/call37.sh [auto|STEPS]", carry=["build/variants/r46"])   steps in this order:
#     t: the whole GPU suite, engine and NCCL tests;
#     m, s, w: scripts/call36.sh's steps (--unfused-merge-gemms traces and rounds; the timed runs'
#        traces; KOSMOS_DIAG=1 against --unfused-signals);
#     c: the issue-5 tables (forward T = 4096 / 128 both models, saved backward against torch
#        autograd) -- wanted on an H200 above all: the issue's goals are stated for it;
#     g: the issue-3 tables: grouped (B [N, K] and [K, N], carry on / off) against torch._grouped_mm
#        on the same group sizes, then `bench gemm` (the eight dense shapes against cuBLAS);
#     p: (r46+) the standalone engine plain against 2-CTA clusters sharing B at the Qwen3 proxy's
#        MoE GEMM shapes, timed and under ncu (ran in call 1);
#     f: (r48+, r49 the final code) the GEMM waiter's fast path: DeepSeek-V3's fused GEMM1 tiles against their own
#        launch's, matched tile by tile, and alternated rounds (r47's f timed KOSMOS_DIAG=2, removed).
# Call 1 (r46): `auto` on an H100 = tpmsw. Call 2 (r47): `auto2` = ft on an H100. Next session:
# run(command="V=r49 scripts/call37.sh auto2", carry=["build/variants/r49"]): cfgt on an H200, ft on
# an H100 (the suite last: a step starts only while time is left).
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r49}"
mode=${1:-auto}
# auto: on an H200 the suite and the issue tables (the goals are stated for it), on an H100 the
# suite and the diagnostics; a step that would likely not finish inside the call's 600 s is left out.
[ "$mode" = auto ] && { [ "$g" = h200 ] && mode=tcgpm || mode=tpmsw; }
[ "$mode" = auto2 ] && { [ "$g" = h200 ] && mode=cfgt || mode=ft; }
budget() { [ $(($(date +%s) - start)) -lt "$1" ] || { echo "no time for step $2 $(el)"; false; }; }
declare -A step_limit=([t]=400 [m]=420 [s]=420 [w]=380 [c]=460 [g]=400 [p]=480 [f]=480)
for ((i = 0; i < ${#mode}; ++i)); do
  budget "${step_limit[${mode:i:1}]:-600}" "${mode:i:1}" || continue
  case ${mode:i:1} in
    t) suite_step "$V" ;;
    m|s|w)  # call36.sh's own start prints the GPU again; its logs go to x-STEP.tgz
      scripts/call36.sh "${mode:i:1}" | grep -v "^[A-Z].*, [0-9.]*$"
      mv $OUT/x.tgz $OUT/x-${mode:i:1}.tgz; mkdir -p $OUT/x ;;
    c) moe_final_form "$V" "${TAG:-37th}"; echo "final form $(el)" ;;
    g) issue3_tables "$V" "${TAG:-37th}" ;;
    p)  # r46: B multicast in 2-CTA clusters (the standalone engine's --pair-b) on the Qwen3 proxy's
        # MoE GEMMs (128 experts x 256 rows, gate+up N 3072 K 4096, down N 4096 K 1536; runs of one
        # slot, one expert's two slots n-major), where the MoE's GEMM1 ran the L2 at 93 % of its
        # peak: if the pair gains there, paired claims in the runtime are the lever
      GB=$(scripts/variants.sh unpack "$V" gemm_engine_bench) || continue
      QG="--grouped-only --equal-groups 128,256 --layout nt --run 1 --raster 2 --pair-b"
      # shellcheck disable=SC2086
      timeout 150 "$GB" $QG --grouped-cases 3072,4096:4096,1536 --reps 20 > $OUT/x/pair-qwen3.txt 2>&1
      echo "pair-b qwen3 rc=$? $(el)"; grep -E "^grouped|engine, 2-CTA|as kosmos|dense, same|skipped|differ" $OUT/x/pair-qwen3.txt | cut -c1-160
      # shellcheck disable=SC2086
      timeout 150 ncu --clock-control none -k regex:gemm_engine -c 4 --metrics $NCU_METRICS "$GB" $QG --grouped-cases 3072,4096 \
        --reps 3 > $OUT/x/pair-ncu.txt 2>&1
      echo "ncu plain (verify), paired (verify), then the timing's rc=$? $(el)"; ncu_summary $OUT/x/pair-ncu.txt ;;
    f)  # r48+ (r49): the GEMM waiter's fast path (op_body.cuh RuntimeGemmWaiter::next_kb) -- do DeepSeek-V3's
        # fused GEMM1 tiles now take their own launch's cycles (calls 1-2: 1.08x late in the launch,
        # with or without the async-proxy fences; r47's KOSMOS_DIAG=2 measured that, then removed)?
        # A trace matched tile by tile, then alternated rounds.
      fwd_trace_match fd 3000 "" "$D,--skip-cublas,--reps,20"
      moe_rounds "$K" 3 $OUT/x "d:$D,--skip-cublas,--reps,20 q:$Q,--skip-cublas,--reps,20 qb:$Q,$B" ;;
  esac
  [ -d $OUT/x ] && tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
