#!/bin/bash
# RECORD ONLY: ran in the twenty-third session on the kstep binaries (cea81b1). The short last k
# block it measures was removed after it (no gain: docs/perf-notes.md, twenty-third session), so
# main's bench moe no longer has --short-last-k.
# The short last k block's device call (written in the twenty-second session, which got no machine:
# NOT RUN YET). Build main, `scripts/variants.sh pack kstep`, then
#   run(command="scripts/call22.sh", carry=["build/variants/kstep"])
# Correctness first: the engine's new test (short last k against whole k blocks, bit for bit and
# fp64) with the dense K-tail sweep and kept-operand runs, and the MoE backward tests (grouped-K
# weight gradients; the new one compares gradients with and without, bit for bit); then the Qwen3
# proxy's saved backward with `--short-last-k` 1 and 0 alternated (the first round with phase times:
# the weight-gradient launch timed alone), then the Qwen3 forward against the cuBLAS grouped pipeline
# (unchanged code path; on an H200 it is the final form's missing number). Every log is written under
# $OUT as it is made (a call cut short still returns what it has).
set -u
start=$(date +%s)
el() { echo "($(($(date +%s) - start)) s)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
E=$(scripts/variants.sh unpack kstep gemm_engine_test) || exit 1
timeout 60 "$E" --gtest_filter='GemmEngineGpu.ShortLastK*:GemmEngineGpu.DenseSweepLayoutsTails:GemmEngineGpu.KeptOperandsEqualRingLoads' > $OUT/engine.txt 2>&1
echo "engine rc=$? $(grep -cE '^\[       OK' $OUT/engine.txt) ok, $(grep -cE '^\[  FAILED' $OUT/engine.txt) failed $(el)"
G=$(scripts/variants.sh unpack kstep kosmos_gpu_tests) || exit 1
timeout 90 "$G" --gtest_filter='GpuMoeBackwardShortLastK.*:Worlds/GpuMoeBackward.*/W1_*' > $OUT/moe.txt 2>&1
echo "moe backward rc=$? $(grep -cE '^\[       OK' $OUT/moe.txt) ok, $(grep -cE '^\[  FAILED' $OUT/moe.txt) failed $(el)"
Q="--model,qwen3-235b,--tokens,4096,--backward,--save-activations"
ROUNDS=${ROUNDS:-2} CASES="qb:$Q,--short-last-k,0 qbs:$Q,--short-last-k,1" \
  timeout ${AB_S:-240} scripts/variants.sh ab kstep
echo "ab done $(el)"
K=$(scripts/variants.sh unpack kstep kosmos) || exit 1
timeout 60 "$K" bench moe --model qwen3-235b --tokens 4096 --json $OUT/fwd-qwen3-t4096.json > $OUT/fwd-qwen3-t4096.txt 2>&1
echo "forward rc=$? $(grep -E '^  (fused|unfused: cub)' $OUT/fwd-qwen3-t4096.txt | tr -s ' ' | tr '\n' ';') $(el)"
