#!/bin/bash
# Ready for the next session (after call31a): the claim helper's two knobs, from branch claim-lead
# (packed as rc30; not on main): KOSMOS_CLAIM_LEAD (how many k blocks before the producer's last load
# the helper claims; 8 on main) and KOSMOS_CLAIM_RECHECK=1 (a claimed task that was not ready is
# checked again until the producer's last load -- on main it is then not carried). First the carry's
# tests with the re-check on, then fused MoE A/B against r30 (processes alternated, two rounds).
#   run(command="scripts/call31b.sh", carry=["build/variants/r30", "build/variants/rc30"])
. "$(dirname "$0")/device_lib.sh"
device_start
T=$(scripts/variants.sh unpack rc30 kosmos_gpu_tests) || exit 1
KOSMOS_CLAIM_RECHECK=1 gtest_step tests-recheck 200 "$T" 'GpuRingCarry.*:GpuMoePublish.*:GpuGemmOp.RingCarryOffAndOn'
CASES="qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations" \
  ROUNDS=2 scripts/variants.sh ab r30 rc30 rc30@KOSMOS_CLAIM_RECHECK=1 rc30@KOSMOS_CLAIM_LEAD=4 rc30@KOSMOS_CLAIM_LEAD=16 2>&1
echo "done $(el)"
