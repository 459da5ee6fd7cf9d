#!/bin/bash
# The twenty-sixth session's second device call: claim groups of about one expert's slots.
# (1) gemm_engine_bench --compare-orders on issue 3's grouped case (skewed, B [N, K] and [K, N];
#     then 32 x 768 rows): runs of one slot down M in groups of 3, 6, 7, 12 and runs of 2 in groups
#     of 3, each against the planner's plan, alternated, the default timed twice (noise floor);
#     torch._grouped_mm on the same sizes.
# (2) The MoE forward (Qwen3 / DeepSeek-V3 proxies, T = 4096) with GEMM1 / GEMM2 claim groups of
#     about one expert's slots, and the saved backward with --bwd-group, alternated with the default.
#   run(command="scripts/call26b.sh", carry=["build/variants/g26"])
. "$(dirname "$0")/device_lib.sh"
device_start
B=$(scripts/variants.sh unpack g26 gemm_engine_bench) || exit 1
K=$(scripts/variants.sh unpack g26 kosmos) || exit 1
L=$OUT/logs; mkdir -p $L
ORD="M,1,3:M,1,6:M,1,7:M,1,12:M,2,3"
for lay in nt nn; do
  timeout 120 $B --grouped-only --layout $lay --reps 10 --compare-orders $ORD --dump-groups $L/sizes.json > $L/cmp-$lay.txt 2>&1
  echo "[$lay] rc=$? $(el)"; grep -A14 "^claim orders" $L/cmp-$lay.txt | cut -c1-150
done
timeout 120 $B --grouped-only --layout nt --reps 10 --uniform-groups --compare-orders $ORD > $L/cmp-uniform-nt.txt 2>&1
echo "[uniform nt] rc=$? $(el)"; grep -A14 "^claim orders" $L/cmp-uniform-nt.txt | cut -c1-150
timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $L/sizes.json --json $L/torch-grouped.json > $L/torch-grouped.txt 2>&1
echo "torch rc=$? $(el)"; tail -4 $L/torch-grouped.txt
# (2) MoE forward: tag:args (spaces as commas)
CASES="q0:--model,qwen3-235b q1g2:--model,qwen3-235b,--gemm1-group,2 q1g3:--model,qwen3-235b,--gemm1-group,3 q12g2:--model,qwen3-235b,--gemm1-group,2,--gemm2-group,2 d0:--model,deepseek-v3 d1g6:--model,deepseek-v3,--gemm1-group,6 d12g6:--model,deepseek-v3,--gemm1-group,6,--gemm2-group,6"
moe_rounds $K 2 $L "$CASES" --tokens 4096 --skip-cublas
grep -h "raster" $L/fwd-q1g2-1.txt $L/fwd-d1g6-1.txt | cut -c1-400
moe_rounds $K 2 $L "bwd-g0:--bwd-group,0 bwd-g2:--bwd-group,2 bwd-g3:--bwd-group,3" \
  --model qwen3-235b --tokens 4096 --backward --save-activations
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
