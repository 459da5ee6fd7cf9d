#!/bin/bash
# Twenty-first session, first device call (main's binaries, `scripts/variants.sh pack main`):
#  1. the whole GPU suite, engine and nccl tests on main (never run on main's final commit);
#  2. the ring carry's third form (fence only after an acquire) against the carry off, same binary;
#  3. what the partial last row blocks of the grouped GEMMs cost: `--routing balanced` (every
#     expert T k / E rows, 128 | that) against uniform, same FLOPs, forward and saved backward.
# Everything comes back in one archive ($OUT/call21.tgz; a call returns at most 8 files).
set -u
start=$(date +%s)
L=/tmp/call21; mkdir -p $L/carry $L/bal
trap 'tar czf "$OUT/call21.tgz" -C $L . 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
OUT=$L timeout 260 scripts/variants.sh tests main > $L/tests.txt 2>&1
echo "tests rc=$? ($(($(date +%s) - start)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $L/tests.txt | sort | uniq -c | head -20
Q="--model,qwen3-235b,--tokens,4096"
D="--model,deepseek-v3,--tokens,4096"
ROUNDS=2 CASES="qfs:$Q,--skip-cublas" OUT=$L/carry timeout 120 scripts/variants.sh ab main main@KOSMOS_RING_CARRY=1
echo "carry done ($(($(date +%s) - start)) s)"
ROUNDS=2 CASES="qu:$Q qbal:$Q,--routing,balanced du:$D,--skip-cublas dbal:$D,--skip-cublas,--routing,balanced qbu:$Q,--backward,--save-activations qbbal:$Q,--backward,--save-activations,--routing,balanced" \
  OUT=$L/bal timeout $((${BUDGET:-560} - ($(date +%s) - start))) scripts/variants.sh ab main
echo "done ($(($(date +%s) - start)) s)"
