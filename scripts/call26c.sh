#!/bin/bash
# The twenty-sixth session's third device call: x26 (grouped GEMMs with >= 4 slots per group claim one
# group's slots at a time: kosmos::Gemm with separate tails, the MoE forward's GEMM1 / GEMM2).
# (1) GPU suite, engine and NCCL tests. (2) issue 3's grouped case, B [N, K] and [K, N]: the new
# default against the planner's former orders (runs of 2 / 4 along N), alternated; B [N, K] again
# with normal operands. (3) torch._grouped_mm on the same sizes, normal and uniform operands.
# (4) MoE forward, DeepSeek-V3 proxy T = 4096: new default vs the former order (GEMM1 runs of 1 in
# groups of 2, GEMM2 runs of 2 in groups of 16) vs groups of 6, two rounds; Qwen3 (rule not applied).
#   run(command="scripts/call26c.sh", carry=["build/variants/x26"])
. "$(dirname "$0")/device_lib.sh"
device_start
scripts/variants.sh tests x26 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
mv $OUT/results.tgz $OUT/tests-x26.tgz; echo "tests $(el)"
B=$(scripts/variants.sh unpack x26 gemm_engine_bench) || exit 1
K=$(scripts/variants.sh unpack x26 kosmos) || exit 1
L=$OUT/logs; mkdir -p $L
for v in "nt uniform" "nn uniform" "nt normal"; do
  set -- $v
  timeout 120 $B --grouped-only --layout $1 --data $2 --reps 10 --compare-orders N,2,8:N,4,7 --dump-groups $L/sizes.json \
    --json $L/grouped-$1-$2.json > $L/cmp-$1-$2.txt 2>&1
  echo "[$v] rc=$? $(el)"; grep -E -A8 "^claim orders|^moe|as kosmos|merge_tails on|dense, same" $L/cmp-$1-$2.txt | grep -v "^--" | cut -c1-150
done
for d in normal uniform; do
  timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $L/sizes.json --data $d --json $L/torch-grouped-$d.json > $L/torch-grouped-$d.txt 2>&1
  echo "torch $d rc=$? $(el)"; tail -3 $L/torch-grouped-$d.txt
done
CASES="d0:--model,deepseek-v3 dold:--model,deepseek-v3,--gemm1-run,1,--gemm1-group,2,--gemm2-run,2,--gemm2-group,16 d6:--model,deepseek-v3,--gemm1-run,1,--gemm1-group,6,--gemm2-run,1,--gemm2-group,6 q0:--model,qwen3-235b"
moe_rounds $K 2 $L "$CASES" --tokens 4096 --skip-cublas
grep -h "raster" $L/fwd-d0-1.txt $L/fwd-q0-1.txt | cut -c1-600
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
