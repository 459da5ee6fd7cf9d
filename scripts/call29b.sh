#!/bin/bash
# The twenty-ninth session's late-write-waits call (replaces call29a, which never found a machine).
# Call 1 (call28a) found the ring carry's loss in fused layers inside the GEMM bodies: carried GEMM2
# tiles ~3 µs longer, while warp 1's release (publish 2) only shrank the gaps. Lead: a task whose
# outputs are awaited waits for its TMA stores' writes, which queue behind the carried loads.
# Binaries: p28 = 5ca837a (the defaults: carry off in fused layers, publish 0); d29 = p28 with a
# diagnostic (bench/logs/variants-29th/d29.patch, never committed): KOSMOS_RING_CARRY=3 carries
# everywhere and skips every awaited write wait (unsafe: the upper bound of the idea); p29 = this
# session's late write waits (GpuOptions::late_writes, safe: the wait moves to the next task's store
# threads and the release waits for it). First the new code's targeted tests, then the A/B (Qwen3 /
# DeepSeek-V3 forward, Qwen3 saved backward, T = 4096, processes alternated, two rounds), then a
# trace of the Qwen3 forward with late write waits (held releases per task label, gaps).
#   run(command="scripts/call29b.sh", carry=["build/variants/p28", "build/variants/d29", "build/variants/p29"])
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack p29 kosmos_gpu_tests) || exit 1
gtest_step tests-late 120 "$T" 'GpuMoeLateWrites.*:GpuRingCarry.*:GpuRuntime.EpochAdvances*'
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab p28 p29@KOSMOS_RING_CARRY=2@KOSMOS_LATE_WRITES=1 d29@KOSMOS_RING_CARRY=3 \
  p29@KOSMOS_RING_CARRY=2@KOSMOS_LATE_WRITES=1@KOSMOS_PUBLISH=2 p29@KOSMOS_PUBLISH=2 2>&1 | grep -v "each launch alone"
echo "ab $(el)"
mkdir -p $OUT/ab && tar xzf $OUT/variants-logs.tgz -C $OUT/ab && grep -o "bitwise [a-z=]*: [a-z]*" $OUT/ab/*.txt | sed "s|.*/||; s/-[0-9]*\.txt:/ /" | sort | uniq -c; rm -rf $OUT/ab
mkdir -p $OUT/trace
K=$(scripts/variants.sh unpack p29 kosmos) || exit 1
for v in 0:0 2:1; do
  IFS=: read c l <<< "$v"
  KOSMOS_RING_CARRY=$c KOSMOS_LATE_WRITES=$l timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas \
    --trace-svg $OUT/trace/q-c$c-l$l.svg > $OUT/trace/q-c$c-l$l.txt 2>&1
  echo "== carry $c late $l rc=$? $(el)"; grep -E "fused|gemm GEMM|span|released after" $OUT/trace/q-c$c-l$l.txt | head -9 | cut -c1-150
  python3 scripts/trace_gaps.py $OUT/trace/q-c$c-l$l.svg 2>&1 | head -6
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
echo "done $(el)"
