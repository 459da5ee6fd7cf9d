#!/usr/bin/env bash
# One device call: runs the GPU tests and benchmarks from an already built tree (carry build/),
# writing logs and JSON under $OUT. Usage on the GPU machine: scripts/device_batch.sh [steps...]
# TEST_TIMEOUT (s, default 360) bounds each test binary (gpu-tests per shard, gemm-tests, nccl-tests).
# Steps: info gpu-tests nccl-tests demo bench-gemm bench-gemm-nt bench-tp runtime-bench trace bench-moe
#        baselines gemm-tests gemm-bench raster-sweep keep-ab ncu-gemm probe multigpu-bench (default: info gpu-tests runtime-bench trace demo)
set -uo pipefail
# Everything is written to a work folder and packed into $OUT/results.tgz at the end (the device
# tool returns at most 8 files).
final="${OUT:-/tmp/kosmos-out}"
out=$(mktemp -d /tmp/kosmos-batch.XXXXXX)
mkdir -p "$final"
bin=${KOSMOS_BIN:-build}  # the built tree's binaries (scripts/variants.sh points it at an unpacked build)
# Test binaries run under a time limit: a GEMM tile's shared-memory barrier waits have no watchdog
# (only the runtime's counter waits have one), so a protocol bug would hang and spend the whole
# call. A limit hit shows as exit status 124 and a "TIMEOUT" line in the step's log.
test_limit=${TEST_TIMEOUT:-360}
limited() {  # limited LOG CMD...: runs CMD under the limit, stdout+stderr to LOG
  local log=$1; shift
  timeout "$test_limit" "$@" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "TIMEOUT: $(basename "$1") killed after ${test_limit} s (TEST_TIMEOUT)" | tee -a "$log"
  return $rc
}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info gpu-tests runtime-bench trace demo)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$out/nvidia-smi.txt" 2>&1
for s in "${steps[@]}"; do
  echo "=== $s ($(date +%T))"
  case "$s" in
    info) $bin/kosmos info 2>&1 | tee "$out/info.txt" ;;
    gpu-tests)
      # The host fp64 references dominate the suite's time, so it runs as KOSMOS_TEST_SHARDS gtest
      # shards in parallel processes (correctness only: no test in the suite times anything).
      shards=${KOSMOS_TEST_SHARDS:-4}
      for ((i = 0; i < shards; ++i)); do
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i limited "$out/gpu-tests-shard$i.log" $bin/tests/kosmos_gpu_tests ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} &
      done
      wait
      cat "$out"/gpu-tests-shard*.log > "$out/gpu-tests.log"
      grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED|==========)|\[watchdog\]|\[gpu-dag\]|\[gemm|Expected|Which is|rel|Failure|error|TIMEOUT" "$out/gpu-tests.log" ;;
    ncu-gemm)
      # Nsight Compute on one GEMM shape: our persistent kernel and cuBLAS's kernel on the same inputs.
      # --clock-control none: the card's clocks are left as they are (the device notes ask for it;
      # ncu's default locks them to base, where our kernel and cuBLAS compare differently).
      for shape in ${NCU_SHAPES:-4096x4096x1536}; do
        for k in "regex:persistent_kernel" "regex:nvjet|sm90_xmma|cutlass"; do
          tag=$([ "$k" = "regex:persistent_kernel" ] && echo kosmos || echo cublas)
          ncu --clock-control none --kernel-name "$k" --launch-skip 3 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
              --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
              $bin/kosmos bench gemm --shapes "$shape" --reps 5 > "$out/ncu-$shape-$tag.txt" 2>&1
          grep -E "Duration|Throughput|Pipe|Stall|Issued|Eligible|Hit Rate|Kernel|nvjet|persistent" "$out/ncu-$shape-$tag.txt" | head -60
        done
      done ;;
    runtime-bench) $bin/kosmos runtime-bench --json "$out/runtime-bench.json" 2>&1 | tee "$out/runtime-bench.log" ;;
    trace) $bin/kosmos trace --executor gpu --world 8 --chunks 32 --json "$out/trace.json" --svg "$out/trace.svg" 2>&1 ;;
    demo) $bin/kosmos demo 2>&1 | tee "$out/demo.log" ;;
    bench-gemm) $bin/kosmos bench gemm --json "$out/bench-gemm.json" 2>&1 | tee "$out/bench-gemm.log" ;;
    bench-gemm-nt) $bin/kosmos bench gemm --layout nt --json "$out/bench-gemm-nt.json" 2>&1 | tee "$out/bench-gemm-nt.log" ;;
    nccl-tests)
      nccl_dir=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null)
      limited "$out/nccl-tests.log" env -u GTEST_FILTER LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0 $bin/kosmos_nccl_transport_tests
      grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED|==========)|Failure|error|TIMEOUT" "$out/nccl-tests.log" ;;
    bench-tp)
      specs=${TP_SPECS:-"llama3-70b:ag_gemm llama3-70b:gemm_rs llama3-70b:gemm_ar llama3-70b:ag_gemm:--backward llama3-70b:gemm_rs:--backward llama3-8b:ag_gemm small-m:ag_gemm gpt3-175b:gemm_rs"}
      for spec in $specs; do
        spec=${spec//:/ }
        set -- $spec
        name="tp-$1-$2${3:+-bwd}-w8"
        $bin/kosmos bench tp --model $1 --op $2 ${3:-} --world 8 --reps 10 --json "$out/$name.json" 2>&1 | grep -v "^\[bench" | tee -a "$out/bench-tp.log"
      done
      $bin/kosmos bench tp --model llama3-70b --op ag_gemm --world 1 --reps 10 --json "$out/tp-llama3-70b-ag_gemm-w1.json" 2>&1 | grep -v "^\[bench" | tee -a "$out/bench-tp.log"
      $bin/kosmos bench tp --model llama3-8b --op ag_gemm --world 8 --reps 3 --trace-svg "$out/trace-ag-gemm-w8.svg" > /dev/null 2>&1
      $bin/kosmos bench tp --model llama3-8b --op gemm_rs --world 8 --reps 3 --trace-svg "$out/trace-gemm-rs-w8.svg" > /dev/null 2>&1
      ;;
    multigpu-bench)
      # scripts/run_multigpu_bench.sh at W = the GPUs visible (1: the one-process-per-GPU path's smoke
      # test); CASES / MOE_CASES / REPS / SKIP_TORCH pass through.
      ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
      BUILD_DIR=$bin scripts/run_multigpu_bench.sh "${MGPU_W:-$ngpu}" "$out/multigpu" 2>&1 | tee "$out/multigpu-bench.log" ;;
    bench-moe)
      # spec: model:tokens:world[:b (backward) | :bs (backward after a forward that saved its activations)]
      moe_specs=${MOE_SPECS:-"qwen3-235b:128:1 qwen3-235b:4096:1 deepseek-v3:128:1 deepseek-v3:4096:1 qwen3-235b:4096:8"}
      for spec in $moe_specs; do
        set -- ${spec//:/ }
        name="moe-$1-t$2-w$3${4:+-bwd}$([ "${4:-}" = bs ] && echo -saved)"
        $bin/kosmos bench moe --model $1 --tokens $2 --world $3 ${4:+--backward} $([ "${4:-}" = bs ] && echo --save-activations) \
          --json "$out/$name.json" 2>&1 | grep -v "^\[bench" | tee -a "$out/bench-moe.log"
      done ;;
    baselines)
      # torch._grouped_mm pipelines on the same routing / group sizes as our benches (W = 1)
      baseline_specs=${BASELINE_SPECS:-"qwen3-235b:128 qwen3-235b:4096 deepseek-v3:128 deepseek-v3:4096"}
      for spec in $baseline_specs; do
        set -- ${spec//:/ }
        $bin/kosmos bench moe --model $1 --tokens $2 --world 1 --dump-routing "$out/routing-$1-t$2.json" --json "$out/moe-$1-t$2-w1-baselines.json" 2>&1 | grep -v "^\[bench" | tee -a "$out/baselines.log"
        python3 bench/torch_baselines.py moe --routing "$out/routing-$1-t$2.json" --json "$out/torch-moe-$1-t$2.json" 2>&1 | tee -a "$out/baselines.log"
      done
      $bin/gemm_engine_bench --grouped-only --dump-groups "$out/grouped-sizes.json" --json "$out/gemm-engine-grouped.json" 2>&1 | tail -6 | tee -a "$out/baselines.log"
      python3 bench/torch_baselines.py grouped-gemm --sizes "$out/grouped-sizes.json" --json "$out/torch-grouped-mm.json" 2>&1 | tee -a "$out/baselines.log" ;;
    probe)
      # Where a GEMM tile's time goes (diagnostic build: cmake --build build --target gemm_probe).
      if [ -x $bin/gemm_probe ]; then
        for shape in ${PROBE_SHAPES:-4096x4096x1536 128x7168x2048 8192x8192x3584}; do
          $bin/gemm_probe ${shape//x/ } --data random --sets 12 2>&1 | tee -a "$out/probe.log"
        done
      else
        echo "probe: $bin/gemm_probe not built (cmake --build build --target gemm_probe)"
      fi ;;
    gemm-tests) limited "$out/gemm-tests.log" $bin/gemm_engine_test; tail -30 "$out/gemm-tests.log" ;;
    gemm-bench) $bin/gemm_engine_bench --json "$out/gemm-bench.json" 2>&1 | tee "$out/gemm-bench.log" | tail -30 ;;
    raster-sweep)
      # Every claim order of kosmos::Gemm against the planner's (grouped cases, then the eight dense
      # shapes in NT); ~3 minutes on the H200.
      $bin/gemm_engine_bench --grouped-only --raster-sweep 10 --json "$out/sweep-grouped.json" > "$out/sweep-grouped.log" 2>&1
      $bin/gemm_engine_bench --dense-only --layout nt --raster-sweep 10 --json "$out/sweep-dense-nt.json" > "$out/sweep-dense-nt.log" 2>&1
      grep -h "confirmation" "$out"/sweep-*.log ;;
    keep-ab)
      # Kept operands on / off in one binary (KOSMOS_GEMM_KEEP_OPERANDS=0), processes alternated, two
      # runs each: short-K dense GEMMs and the Qwen3 saved backward (its weight-gradient tiles).
      for r in 1 2; do
        for v in 1 0; do
          KOSMOS_GEMM_KEEP_OPERANDS=$v $bin/kosmos bench gemm --shapes 16384x4096x128,16384x4096x256,16384x4096x512 --reps 30 \
            --json "$out/gemm-short-k-keep$v-$r.json" 2>&1 | grep -E "^[0-9]" | sed "s/^/keep=$v run $r: /"
          KOSMOS_GEMM_KEEP_OPERANDS=$v $bin/kosmos bench moe --model qwen3-235b --tokens 4096 --backward --save-activations --reps 20 \
            --json "$out/moe-qwen3-bwd-saved-keep$v-$r.json" 2>&1 | grep -E "fused backward" | sed "s/^/keep=$v run $r: /"
        done
      done ;;
    *) echo "unknown step $s" ;;
  esac
  tar czf "$final/results.tgz" -C "$out" .  # after every step: a call cut short keeps what finished
done
echo "packed $(ls "$out" | wc -l) files into $final/results.tgz"
