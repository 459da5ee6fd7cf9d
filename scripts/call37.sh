#!/bin/bash
# The thirty-seventh session's device calls (r45 = e8358e0, the thirty-sixth session's final code;
# its device code -- the KOSMOS_DIAG bit, trace stamps only when tracing -- never GPU-run).
#   run(command="V=r45 scripts/call37.sh tm", carry=["build/variants/r45"])   steps in this order:
#     t: the whole GPU suite, engine and NCCL tests;
#     m, s, w: scripts/call36.sh's steps (--unfused-merge-gemms traces and rounds; the timed runs'
#        traces; KOSMOS_DIAG=1 against --unfused-signals);
#     c: the issue-5 tables (forward T = 4096 / 128 both models, saved backward against torch
#        autograd) -- wanted on an H200 above all: the issue's goals are stated for it;
#     g: the issue-3 tables: grouped (B [N, K] and [K, N], carry on / off) against torch._grouped_mm
#        on the same group sizes, then `bench gemm` (the eight dense shapes against cuBLAS).
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r45}"
mode=${1:-tm}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    t) suite_step "$V" ;;
    m|s|w)  # call36.sh's own start prints the GPU again; its logs go to x-STEP.tgz
      scripts/call36.sh "${mode:i:1}" | grep -v "^[A-Z].*, [0-9.]*$"
      mv $OUT/x.tgz $OUT/x-${mode:i:1}.tgz; mkdir -p $OUT/x ;;
    c) moe_final_form "$V" "${TAG:-37th}"; echo "final form $(el)" ;;
    g)
      grouped_carry_table "$V" "${TAG:-37th}"
      KOSMOS_COMMIT=$(variant_commit "$V") timeout 120 "$K" bench gemm --reps 20 --json $OUT/gemm/gemm-$g-${TAG:-37th}.json > $OUT/gemm/dense.txt 2>&1
      echo "bench gemm rc=$? $(el)"; grep -E 'x|geomean|geometric' $OUT/gemm/dense.txt | tail -12
      tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm ;;
  esac
  [ -d $OUT/x ] && tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
