#!/bin/bash
# Twenty-first session, second device call (binaries packed as `tails`): merged tails
# (kGemmMergeTails, MoeConfig::merge_tails) -- the new GPU test first, the whole GPU suite, engine and
# nccl tests, then bench moe on `main` (this session's first build), `tails` and `tails` with
# KOSMOS_GEMM_MERGE_TAILS=0 (processes alternated), forward and saved backward, Qwen3-235B and
# DeepSeek-V3 proxies at T = 4096, and one run against the cuBLAS pipeline.
# Everything comes back in one archive ($OUT/call21b.tgz; a call returns at most 8 files).
set -u
start=$(date +%s)
L=/tmp/call21b; mkdir -p $L/ab
trap 'tar czf "$OUT/call21b.tgz" -C $L . 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
G=$(scripts/variants.sh unpack tails kosmos_gpu_tests)
timeout 120 "$G" --gtest_filter='GpuMoeMergedTails.*' > $L/merged-tails-test.txt 2>&1
echo "merged-tails test rc=$? ($(($(date +%s) - start)) s)"; grep -E "OK \]|FAILED|Failure|differ|expected" $L/merged-tails-test.txt | head -20
OUT=$L timeout 250 scripts/variants.sh tests tails > $L/tests.txt 2>&1
echo "tests rc=$? ($(($(date +%s) - start)) s)"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $L/tests.txt | sort | uniq -c | head -20
Q="--model,qwen3-235b,--tokens,4096"
D="--model,deepseek-v3,--tokens,4096"
# main = this session's first build (no merged tails); tails with them on, and off by environment
ROUNDS=2 CASES="qf:$Q,--skip-cublas df:$D,--skip-cublas qb:$Q,--backward,--save-activations" \
  OUT=$L/ab timeout $((${BUDGET:-540} - 60 - ($(date +%s) - start))) scripts/variants.sh ab main tails tails@KOSMOS_GEMM_MERGE_TAILS=0
echo "ab done ($(($(date +%s) - start)) s)"
K=$(scripts/variants.sh unpack tails kosmos)
timeout 50 "$K" bench moe --model qwen3-235b --tokens 4096 --json $L/moe-qwen3-t4096.json > $L/moe-qwen3-t4096.txt 2>&1
grep -E '^  (fused|unfused|cuBLAS|torch)|x fused|rel.err' $L/moe-qwen3-t4096.txt | head -8
echo "done ($(($(date +%s) - start)) s)"
