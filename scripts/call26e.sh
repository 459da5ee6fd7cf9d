#!/bin/bash
# The twenty-sixth session's fifth device call: y26 (x26 + the backward's expert-group claims) --
# GPU suite, engine and NCCL tests; the final form (forward against the cuBLAS pipeline, saved
# backward against torch autograd); torch._grouped_mm three times per operand distribution on
# issue 3's sizes (its spread from run to run), and our grouped table once more.
#   run(command="scripts/call26e.sh", carry=["build/variants/y26"])
. "$(dirname "$0")/device_lib.sh"
device_start
export KOSMOS_COMMIT=$(head -1 build/variants/y26/commit.txt)
scripts/variants.sh tests y26 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-y26.tgz; echo "tests $(el)"
moe_final_form y26 26th-b
B=$(scripts/variants.sh unpack y26 gemm_engine_bench) || exit 1
L=$OUT/logs; mkdir -p $L
timeout 120 $B --grouped-only --layout nt --reps 20 --dump-groups $L/sizes.json --json $L/gemm-engine-grouped-nt-$g-26th.json > $L/grouped-nt.txt 2>&1
echo "[grouped nt] rc=$? $(el)"; grep -E "^moe|as kosmos|merge_tails on|dense, same" $L/grouped-nt.txt | cut -c1-150
for i in 1 2 3; do
  for d in uniform normal; do
    timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $L/sizes.json --data $d --json $L/torch-grouped-mm-$d-$g-26th-$i.json > $L/torch-$d-$i.txt 2>&1
    echo "torch $d $i rc=$? $(el) $(tail -3 $L/torch-$d-$i.txt | head -2 | awk '{printf "%s: %s TF/s (dense %s); ", $2, $6, $8}')"
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
echo "done $(el)"
