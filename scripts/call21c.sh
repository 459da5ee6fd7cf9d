#!/bin/bash
# Twenty-first session, third device call: the merged-tails GPU test on a plan that merges (call 2's
# plan had picked 128 x 128 tiles), then bench moe on main / tails / tails without merging / tails3
# (the merged-tail tile with 3 stages and two staging buffers instead of 4 and one), uniform and
# balanced routing (balanced: no tails, so what the merged-tail tile costs full tiles).
set -u
start=$(date +%s)
L=/tmp/call21c; mkdir -p $L/ab
trap 'tar czf "$OUT/call21c.tgz" -C $L . 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
G=$(scripts/variants.sh unpack tails kosmos_gpu_tests)
timeout 120 "$G" --gtest_filter='GpuMoeMergedTails.*:Worlds/GpuMoe.*' > $L/merged-tails-test.txt 2>&1
echo "merged-tails + MoE tests rc=$? ($(($(date +%s) - start)) s)"; grep -E "OK \]|FAILED|Failure|differ|expected|Which" $L/merged-tails-test.txt | head -20
Q="--model,qwen3-235b,--tokens,4096,--skip-cublas"
D="--model,deepseek-v3,--tokens,4096,--skip-cublas"
ROUNDS=2 CASES="qf:$Q qbal:$Q,--routing,balanced df:$D" \
  OUT=$L/ab timeout $((${BUDGET:-400} - ($(date +%s) - start))) scripts/variants.sh ab main tails tails@KOSMOS_GEMM_MERGE_TAILS=0 tails3
echo "done ($(($(date +%s) - start)) s)"
