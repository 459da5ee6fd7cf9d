#!/bin/bash
# The twenty-sixth session's first device call: the twenty-fifth review's form (rev25: the GEMM tile
# evaluates its run direction per tile; the merged op kernel's spill back at 180/264 B) on the GPU --
# the suite, the engine and NCCL tests; the MoE forward / saved backward alternated against final25
# (the last measured form); then call25h's claim orders (grouped GEMM claimed one expert at a time).
#   run(command="scripts/call26a.sh", carry=["build/variants"])
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests rev25 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-rev25.tgz; echo "tests $(el)"
ROUNDS=2 CASES="qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas" \
  scripts/variants.sh ab final25 rev25 | grep -v "each launch"
echo "ab $(el)"
B=$(scripts/variants.sh unpack rev25 gemm_engine_bench) || exit 1
mkdir -p $OUT/claim
for args in "--uniform-groups" "--uniform-groups --claim-order M,1,6" "" "--claim-order M,1,6" "--uniform-groups --claim-order M,1,12"; do
  f=$OUT/claim/grouped-$(echo "x $args" | tr -d ' -' | tr ',' '_').txt
  timeout 60 "$B" --grouped-only --layout nt --reps 10 $args > $f 2>&1
  echo "[$args] rc=$? $(el)"; grep -A1 "^moe" $f | grep -E "^moe|separate" | cut -c1-190
done
tar czf $OUT/claim.tgz -C $OUT claim && rm -rf $OUT/claim
