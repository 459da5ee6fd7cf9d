#!/bin/bash
# Twentieth session, second device call: the ring carry's second form (after the epilogue) on the
# `carry2` build: the MoE, GEMM-op and TP GPU tests with KOSMOS_RING_CARRY=1 (every test carries), then bench moe
# with it off and on (processes alternated). Everything comes back in one archive ($OUT/call20b.tgz;
# a call returns at most 8 files).
set -u
start=$(date +%s)
L=/tmp/call20b; mkdir -p $L
trap 'tar czf "$OUT/call20b.tgz" -C $L . 2> /dev/null' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/gpu.txt
G=$(scripts/variants.sh unpack carry2 kosmos_gpu_tests)
KOSMOS_RING_CARRY=1 timeout 150 "$G" --gtest_filter='GpuRingCarry.*:Worlds/GpuMoe.*:GpuGemmOp.SweepTailsAllLayouts:Worlds/GpuMoeBackward.*W1_*' > $L/tests-carry2.txt 2>&1
echo "tests (KOSMOS_RING_CARRY=1) rc=$? ($(($(date +%s) - start)) s)"
grep -E "OK \]|FAILED|PASSED" $L/tests-carry2.txt | head -30
ROUNDS=2 CASES="qfs:--model,qwen3-235b,--tokens,4096,--skip-cublas,--route-chunks,0 qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  OUT=$L timeout $((${BUDGET:-380} - ($(date +%s) - start))) scripts/variants.sh ab carry2 carry2@KOSMOS_RING_CARRY=1
echo "done ($(($(date +%s) - start)) s)"
