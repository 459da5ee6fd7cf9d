#!/bin/bash
# The twenty-sixth session's fourth device call: the final form of x26 (expert-group claims) --
# the MoE forward against the cuBLAS grouped pipeline on the four shapes and the saved backward
# against torch autograd (device_lib.sh moe_final_form); the DeepSeek-V3 saved backward with claim
# groups of 8 (one expert's slots, not the backward's default) alternated with its default; issue 3's
# grouped table (B [N, K] and [K, N], JSON) and torch._grouped_mm on the same sizes, both operand
# distributions.
#   run(command="scripts/call26d.sh", carry=["build/variants/x26"], kind="nvidia-h200")
. "$(dirname "$0")/device_lib.sh"
device_start
export KOSMOS_COMMIT=$(head -1 build/variants/x26/commit.txt)
moe_final_form x26 26th
K=$(scripts/variants.sh unpack x26 kosmos) || exit 1
B=$(scripts/variants.sh unpack x26 gemm_engine_bench) || exit 1
L=$OUT/logs; mkdir -p $L
moe_rounds $K 2 $L "dbwd-g0:--bwd-group,0 dbwd-g8:--bwd-group,8" \
  --model deepseek-v3 --tokens 4096 --backward --save-activations
grep -h "moe_backward" $L/fwd-dbwd-g0-1.txt | cut -c1-500
for lay in nt nn; do
  timeout 120 $B --grouped-only --layout $lay --reps 20 --dump-groups $L/sizes.json \
    --json $L/gemm-engine-grouped-$lay-$g-26th.json > $L/grouped-$lay.txt 2>&1
  echo "[grouped $lay] rc=$? $(el)"; grep -E "^moe|as kosmos|merge_tails on|dense, same" $L/grouped-$lay.txt | cut -c1-150
done
for d in uniform normal; do
  timeout 120 python3 bench/torch_baselines.py grouped-gemm --sizes $L/sizes.json --data $d --json $L/torch-grouped-mm-$d-$g-26th.json > $L/torch-$d.txt 2>&1
  echo "torch $d rc=$? $(el)"; tail -3 $L/torch-$d.txt | head -2
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
echo "done $(el)"
