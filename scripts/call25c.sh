#!/bin/bash
# The twenty-fifth session's third device call: final25 (the partial keep removed; StageWalk in the
# host-compilable stage_walk.h -- same logic, the op kernel's SASS differs in register allocation --;
# GemmOptions::merge_tails now kAuto / kOn / kOff) against main25 (95fdcc7):
#   run(command="scripts/call25c.sh", carry=["build/variants/main25", "build/variants/final25"])
# 1. final25's whole GPU suite, engine tests and nccl one-rank tests.
# 2. Issue 3's grouped case, B [K, N] and B [N, K]: separate tiles, merged, and which one the default
#    plans (kAuto: K <= 4096), with torch._grouped_mm on the same group sizes.
# 3. final25 against main25, alternated, two rounds: Qwen3 T = 4096 saved backward and forward.
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests final25 > $OUT/tests.txt 2>&1
echo "tests rc=$? $(el)"; grep -E "PASSED|FAILED|passed|failed|TIMEOUT" $OUT/tests.txt | head -12
mv $OUT/results.tgz $OUT/tests-logs.tgz 2> /dev/null
B=$(scripts/variants.sh unpack final25 gemm_engine_bench) || exit 1
for l in nn nt; do
  timeout 150 "$B" --grouped-only --layout $l --dump-groups $OUT/grouped-sizes.json --json $OUT/gemm-engine-grouped-$l-$g-25th-final.json > $OUT/grouped-$l.txt 2>&1
  echo "grouped bench $l rc=$? $(el)"; grep -A6 "^moe" $OUT/grouped-$l.txt | cut -c1-200
done
timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $OUT/grouped-sizes.json --json $OUT/torch-grouped-mm-$g-25th-final.json > $OUT/torch-grouped.txt 2>&1
echo "torch grouped rc=$? $(el)"; tail -4 $OUT/torch-grouped.txt
# (at most 8 files come back from a call: the text logs travel in one archive)
tar czf $OUT/grouped-logs.tgz -C $OUT grouped-sizes.json grouped-nn.txt grouped-nt.txt torch-grouped.txt && \
  rm -f $OUT/grouped-sizes.json $OUT/grouped-nn.txt $OUT/grouped-nt.txt $OUT/torch-grouped.txt
Q="--model,qwen3-235b,--tokens,4096"
ROUNDS=2 CASES="qb:$Q,--backward,--save-activations qf:$Q,--skip-cublas" timeout 200 scripts/variants.sh ab main25 final25
mv $OUT/variants-logs.tgz $OUT/ab-final25.tgz
echo "done $(el)"
