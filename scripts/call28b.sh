#!/bin/bash
# scripts/call28a.sh cut to what little device time was left: the publish modes and the carry on the
# fused forward (Qwen3 / DeepSeek-V3 T = 4096, alternated, two rounds), then the publish tests.
#   run(command="scripts/call28b.sh", carry=["build/variants/p28"])
. "$(dirname "$0")/device_lib.sh"
device_start
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas" \
  ROUNDS=2 scripts/variants.sh ab p28 p28@KOSMOS_PUBLISH=1 p28@KOSMOS_RING_CARRY=2 p28@KOSMOS_PUBLISH=2@KOSMOS_RING_CARRY=2 2>&1
echo "ab $(el)"
T=$(scripts/variants.sh unpack p28 kosmos_gpu_tests) || exit 1
gtest_step tests-publish 100 "$T" 'GpuRuntime.*:GpuMoePublish.*'
