#!/bin/bash
# Twenty-second session's one device call (about two minutes of device time were left to the
# session): the short last k block (kGemmShortLastK) -- the engine's dense K-tail sweep and
# kept-operand runs against fp64, the W = 1 MoE backward GPU tests (grouped-K weight gradients) --
# then the Qwen3 proxy's saved backward with the flag on and off (KOSMOS_GEMM_SHORT_LAST_K=0) in the
# same binary, one round with phase times (the weight-gradient launch timed alone), then the Qwen3
# forward against the cuBLAS grouped pipeline. Every log is written under $OUT as it is made (a
# call cut short by the device budget still returns what it has).
# run(command="scripts/call22.sh", carry=["build/variants/kstep"])
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
E=$(scripts/variants.sh unpack kstep gemm_engine_test) || exit 1
timeout 40 "$E" --gtest_filter='GemmEngineGpu.DenseSweepLayoutsTails:GemmEngineGpu.KeptOperandsEqualRingLoads' > $OUT/engine.txt 2>&1
echo "engine rc=$? $(grep -cE '^\[       OK' $OUT/engine.txt) ok, $(grep -cE '^\[  FAILED' $OUT/engine.txt) failed $(el)"
G=$(scripts/variants.sh unpack kstep kosmos_gpu_tests) || exit 1
timeout 40 "$G" --gtest_filter='Worlds/GpuMoeBackward.*/W1_*' > $OUT/moe.txt 2>&1
echo "moe backward rc=$? $(grep -cE '^\[       OK' $OUT/moe.txt) ok, $(grep -cE '^\[  FAILED' $OUT/moe.txt) failed $(el)"
ROUNDS=${ROUNDS:-1} CASES="qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  timeout ${AB_S:-90} scripts/variants.sh ab kstep kstep@KOSMOS_GEMM_SHORT_LAST_K=0
echo "ab done $(el)"
K=$(scripts/variants.sh unpack kstep kosmos) || exit 1
timeout 45 "$K" bench moe --model qwen3-235b --tokens 4096 --json $OUT/fwd-qwen3-t4096.json > $OUT/fwd-qwen3-t4096.txt 2>&1
echo "forward rc=$? $(grep -E '^  (fused|unfused: cub)' $OUT/fwd-qwen3-t4096.txt | tr -s ' ' | tr '\n' ';') $(el)"
