#!/bin/bash
# The twenty-sixth session's sixth device call: does the expert-group claim (ops::expert_claim_group)
# hold at more slots per expert? DeepSeek-V3 proxy T = 8192 (16 per expert) and Qwen3 proxy
# T = 16384 (8 per expert), forward and saved backward: y26's default against the order the planner
# chose before (read from the default run's plan description, then imposed with --gemm1-run /
# --gemm1-group / --gemm2-run / --gemm2-group / --bwd-run / --bwd-group), alternated, two rounds.
#   run(command="scripts/call26f.sh", carry=["build/variants/y26"])
. "$(dirname "$0")/device_lib.sh"
device_start
K=$(scripts/variants.sh unpack y26 kosmos) || exit 1
L=$OUT/logs; mkdir -p $L
for mt in deepseek-v3:8192 qwen3-235b:16384; do
  m=${mt%%:*}; t=${mt#*:}
  timeout 120 $K bench moe --model $m --tokens $t --skip-cublas > $L/$m-new-0.txt 2>&1
  echo "$m T=$t new r0: $(moe_times $L/$m-new-0.txt) $(el)"
  d=$(grep -o "raster runs of [0-9]* along M, groups of [0-9]*.*" $L/$m-new-0.txt | head -1)
  r1=$(echo "$d" | grep -oE "runs of [0-9]+ along M, groups of [0-9]+" | sed -n 1p | grep -oE "[0-9]+" | tr '\n' ' ')
  r2=$(echo "$d" | grep -oE "runs of [0-9]+ along M, groups of [0-9]+" | sed -n 2p | grep -oE "[0-9]+" | tr '\n' ' ')
  set -- $r1 $r2
  old="--gemm1-run $1 --gemm1-group $2 --gemm2-run $3 --gemm2-group $4"
  echo "  old forward order: $old"; echo "$d" | cut -c1-400
  for round in 1 2; do
    timeout 120 $K bench moe --model $m --tokens $t --skip-cublas $old > $L/$m-old-$round.txt 2>&1
    echo "$m T=$t old r$round: $(moe_times $L/$m-old-$round.txt) $(el)"
    timeout 120 $K bench moe --model $m --tokens $t --skip-cublas > $L/$m-new-$round.txt 2>&1
    echo "$m T=$t new r$round: $(moe_times $L/$m-new-$round.txt) $(el)"
  done
  timeout 150 $K bench moe --model $m --tokens $t --backward --save-activations > $L/$m-bnew-0.txt 2>&1
  echo "$m T=$t bwd new r0: $(moe_times $L/$m-bnew-0.txt) $(el)"
  b=$(grep -o "moe_backward: .*" $L/$m-bnew-0.txt | grep -oE "\(runs of [0-9]+ along M, groups of [0-9]+" | head -1 | grep -oE "[0-9]+" | tr '\n' ' ')
  set -- $b
  [ $# -eq 2 ] || { echo "  no backward order found"; continue; }
  bold="--bwd-run $1 --bwd-group $2"; echo "  old backward order: $bold"
  for round in 1 2; do
    timeout 150 $K bench moe --model $m --tokens $t --backward --save-activations $bold > $L/$m-bold-$round.txt 2>&1
    echo "$m T=$t bwd old r$round: $(moe_times $L/$m-bold-$round.txt) $(el)"
    timeout 150 $K bench moe --model $m --tokens $t --backward --save-activations > $L/$m-bnew-$round.txt 2>&1
    echo "$m T=$t bwd new r$round: $(moe_times $L/$m-bnew-$round.txt) $(el)"
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
echo "done $(el)"
