#!/bin/bash
# The twenty-ninth session's second call. Call 1 (call28a) measured warp 1's release (publish 2) only
# with the ring carry on in fused layers: it took back a third to a half of the carry's loss, and the
# traces showed the carried GEMM2 tiles ~3 µs longer in their bodies (fused only). Here, processes
# alternated, two rounds, on the Qwen3 / DeepSeek-V3 forward and the Qwen3 saved backward (T = 4096):
#   p28, p28 with publish 2 and 1 (the carry at its default: off in fused layers);
#   d29 = p28's code with a diagnostic (never committed; bench/logs/variants-29th/d29.patch):
#   KOSMOS_RING_CARRY=3 carries in every launch and skips the write wait of awaited TMA stores
#   (outputs may be read early: unsafe) -- is that wait behind the carried loads the carry's loss?
# Then the Qwen3 forward traced (p28 publish 0 / 2, d29 carry 3) with the idle time between tasks
# per SM (scripts/trace_gaps.py).
#   run(command="scripts/call29a.sh", carry=["build/variants/p28", "build/variants/d29"])
. "$(dirname "$0")/device_lib.sh"
device_start
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab p28 p28@KOSMOS_PUBLISH=2 p28@KOSMOS_PUBLISH=1 d29@KOSMOS_RING_CARRY=3 \
  d29@KOSMOS_RING_CARRY=3@KOSMOS_PUBLISH=2 2>&1 | grep -v "each launch alone"
echo "ab $(el)"
mkdir -p $OUT/ab && tar xzf $OUT/variants-logs.tgz -C $OUT/ab && grep -o "bitwise [a-z=]*: [a-z]*" $OUT/ab/*.txt | sed "s|.*/||; s/-[0-9]*\.txt:/ /" | sort | uniq -c; rm -rf $OUT/ab
mkdir -p $OUT/trace
for v in p28:0:1 p28:2:1 d29:0:3 d29:2:3; do
  IFS=: read b p c <<< "$v"
  K=$(scripts/variants.sh unpack $b kosmos) || exit 1
  KOSMOS_PUBLISH=$p KOSMOS_RING_CARRY=$c timeout 90 "$K" bench moe --model qwen3-235b --tokens 4096 --skip-cublas \
    --trace-svg $OUT/trace/q-$b-p$p-c$c.svg > $OUT/trace/q-$b-p$p-c$c.txt 2>&1
  echo "== $b publish $p carry $c rc=$? $(el)"; grep -E "fused|gemm GEMM|span" $OUT/trace/q-$b-p$p-c$c.txt | head -6 | cut -c1-150
  python3 scripts/trace_gaps.py $OUT/trace/q-$b-p$p-c$c.svg 2>&1 | head -8
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
echo "done $(el)"
