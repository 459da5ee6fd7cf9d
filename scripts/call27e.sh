#!/bin/bash
# The twenty-seventh session's fifth device call: with the early ticket no longer waited for (c27d),
# does the ring carry still slow the fused MoE launches? Default (off in fused launches) against
# KOSMOS_RING_CARRY=2 (on everywhere), processes alternated, two rounds.
#   run(command="scripts/call27e.sh", carry=["build/variants/c27d"])
. "$(dirname "$0")/device_lib.sh"
device_start
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations db:--model,deepseek-v3,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab c27d c27d@KOSMOS_RING_CARRY=2 2>&1
echo "ab $(el)"
