#!/bin/bash
# The thirty-eighth session's device calls (r49 = 839be9c, the thirty-seventh session's final code; r50 = d22f312: r49's
# device code, with the breakdown's tensor column -- the next session's binary).
#   run(command="V=r50 scripts/call38.sh [STEPS]", carry=["build/variants/r50", "build/gather_probe"])
#   steps in this order:
#     g: build/gather_probe with B and A only (one-row TMA boxes and cp.async against today's box);
#     q: a Qwen3 forward trace matched tile by tile (GEMM1 and GEMM2 against their own launches): do
#        the fused Qwen3 GEMM tiles still cost more than their own launch's on r49 (r46: GEMM1 3 %,
#        GEMM2 6 % more SM time)?
#     s: the signals' cost on the tiles: the Qwen3 forward traced three ways, each matched tile by tile
#        -- plain (the unfused launches have no signals), `--unfused-signals` (the unfused launches
#        keep the fused plan's signals: the TMA stores' write wait and the release), and that with
#        KOSMOS_DIAG=1 (launches without waits skip the write wait, so only the release remains).
#        If the fused / unfused GEMM2 ratio (call 3: 1.039 late) goes to ~1.0 with signals, the
#        signalled tile's end is what the fused tiles pay.
# Default: gq. (Call 1 ran `scripts/call37.sh auto2`, call 2 the probe's first version and
# `scripts/call37.sh c`.)
. "$(dirname "$0")/device_lib.sh"
call_start "${V:-r50}"
mode=${1:-gq}
for ((i = 0; i < ${#mode}; ++i)); do
  case ${mode:i:1} in
    g)
      timeout 150 build/gather_probe --reps 5 > $OUT/x/gather.txt 2>&1
      echo "gather_probe rc=$? $(el)"; cat $OUT/x/gather.txt
      timeout 90 build/gather_probe --no-b --reps 5 > $OUT/x/gather-a-only.txt 2>&1
      echo "gather_probe --no-b rc=$? $(el)"; grep -E "^  round|^layout|throughput" $OUT/x/gather-a-only.txt ;;
    q)
      fwd_trace_match fq 2000 "" "$Q,--skip-cublas,--reps,20" ;;
    s)
      for v in plain sig sigdiag; do
        extra=; envs=
        [ $v != plain ] && extra=,--unfused-signals
        [ $v = sigdiag ] && envs=KOSMOS_DIAG=1
        fwd_trace_match s$v 2000 "$envs" "$Q,--skip-cublas,--reps,20$extra"
      done ;;
  esac
  tar czf $OUT/x.tgz -C $OUT x
done
rm -rf $OUT/x
