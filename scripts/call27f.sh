#!/bin/bash
# The twenty-seventh session's sixth device call: traces of the fused Qwen3 / DeepSeek-V3 forward
# (T = 4096) with the default (no carry in fused layers) and KOSMOS_RING_CARRY=2, for the question
# of why the carry slows fused layers (per task label: SM time, gaps).
#   run(command="scripts/call27f.sh", carry=["build/variants/c27d"])
. "$(dirname "$0")/device_lib.sh"
device_start
K=$(scripts/variants.sh unpack c27d kosmos) || exit 1
mkdir -p $OUT/trace
for m in qwen3-235b deepseek-v3; do
  for c in 1 2; do
    KOSMOS_RING_CARRY=$c timeout 90 "$K" bench moe --model $m --tokens 4096 --skip-cublas --trace-svg $OUT/trace/$m-carry$c.svg > $OUT/trace/$m-carry$c.txt 2>&1
    echo "== $m carry $c rc=$? $(el)"; grep -vE "^\s*$" $OUT/trace/$m-carry$c.txt | tail -22 | cut -c1-160
  done
done
rm -f $OUT/trace/*.svg
tar czf $OUT/trace.tgz -C $OUT trace && rm -rf $OUT/trace
