#!/usr/bin/env bash
# One device call: runs the GPU tests and benchmarks from an already built tree (carry build/),
# writing logs and JSON under $OUT. Usage on the GPU machine: scripts/device_batch.sh [steps...]
# Steps: info gpu-tests runtime-bench trace demo gemm-tests gemm-bench (default: all present)
set -uo pipefail
out="${OUT:-/tmp/kosmos-out}"
mkdir -p "$out"
bin=build
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info gpu-tests runtime-bench trace demo)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$out/nvidia-smi.txt" 2>&1
for s in "${steps[@]}"; do
  echo "=== $s ($(date +%T))"
  case "$s" in
    info) $bin/kosmos info 2>&1 | tee "$out/info.txt" ;;
    gpu-tests) $bin/tests/kosmos_gpu_tests ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} 2>&1 | tee "$out/gpu-tests.log" | grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED|==========)|\[watchdog\]|\[gpu-dag\]|\[gemm|Expected|Which is|rel|Failure|error" ;;
    runtime-bench) $bin/kosmos runtime-bench --json "$out/runtime-bench.json" 2>&1 | tee "$out/runtime-bench.log" ;;
    trace) $bin/kosmos trace --executor gpu --world 8 --chunks 32 --json "$out/trace.json" --svg "$out/trace.svg" 2>&1 ;;
    demo) $bin/kosmos demo 2>&1 | tee "$out/demo.log" ;;
    bench-gemm) $bin/kosmos bench gemm --json "$out/bench-gemm.json" 2>&1 | tee "$out/bench-gemm.log" ;;
    gemm-tests) $bin/tests/gemm_engine_test 2>&1 | tee "$out/gemm-tests.log" | tail -30 ;;
    gemm-bench) $bin/gemm_engine_bench --json "$out/gemm-bench.json" 2>&1 | tee "$out/gemm-bench.log" | tail -30 ;;
    *) echo "unknown step $s" ;;
  esac
done
