#!/bin/bash
# The thirty-second session's second experiment: GEMM1 claimed expert-major (MoeConfig::
# gemm1_expert_major, kGemmExpertMajor). Call 3's ncu had the Qwen3 proxy's GEMM1 read 4.54 GB from
# DRAM for 3.47 GB of weights and x, the L2 at 93 % of its peak and the tensor pipe at 58 %: an
# expert's two slots read each weight column block ~12 claims (~5 µs) apart and the second read
# misses. Expert-major puts them one claim apart.
#   run(command="V=r32e scripts/call32b.sh", carry=["build/variants/r32e"])
# Mode bwd (for the next build, which has backward_expert_major): the saved backward, dX slot-major
# against dX expert-major, same binary alternated, three rounds, then the GPU test written for it:
#   run(command="V=r33 scripts/call32b.sh bwd", carry=["build/variants/r33"])
. "$(dirname "$0")/device_lib.sh"
device_start
V=${V:-r32e}
if [ "${1:-}" = bwd ]; then
  K=$(scripts/variants.sh unpack $V kosmos) || exit 1
  T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
  mkdir -p $OUT/bwd
  gtest_step bwd/tests 120 "$T" 'GpuMoeExpertMajor.*'
  moe_rounds "$K" 3 $OUT/bwd "qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations,--reps,10 qbe:--model,qwen3-235b,--tokens,4096,--backward,--save-activations,--reps,10,--bwd-expert-major,1 db:--model,deepseek-v3,--tokens,4096,--backward,--save-activations,--reps,10 dbe:--model,deepseek-v3,--tokens,4096,--backward,--save-activations,--reps,10,--bwd-run,1,--bwd-group,1,--bwd-expert-major,1"
  tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/bwd
  exit 0
fi
K=$(scripts/variants.sh unpack $V kosmos) || exit 1
T=$(scripts/variants.sh unpack $V kosmos_gpu_tests) || exit 1
mkdir -p $OUT/t $OUT/ab
# (Little device time left: the tests the change touches -- expert-major against slot-major, the
# merged tails it maps, GEMM runs, the ring carry that resolves tiles for the next task, the GEMM op.)
for i in 0 1 2; do
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 100 "$T" \
    --gtest_filter='GpuMoeExpertMajor.*:GpuMoeMergedTails.*:GpuMoeRuns.*:GpuRingCarry.*:GpuGemmOp.*' > $OUT/t/tests-$i.txt 2>&1 &
done
wait
cat $OUT/t/*.txt | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure" | sort | uniq -c | head; echo "tests $(el)"
# Same binary, alternated: the default order against expert-major (Qwen3: the planner's one-slot runs
# one by one already; DeepSeek-V3: its claim groups of one expert's slots against expert-major).
moe_rounds "$K" 2 $OUT/ab "q:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--reps,10 qe:--model,qwen3-235b,--tokens,4096,--skip-cublas,--phase-times,--reps,10,--gemm1-expert-major,1 d:--model,deepseek-v3,--tokens,4096,--skip-cublas de:--model,deepseek-v3,--tokens,4096,--skip-cublas,--gemm1-run,1,--gemm1-group,1,--gemm1-expert-major,1"
grep -h "each launch alone" $OUT/ab/fwd-q*-*.txt | cut -c1-200
grep -h "expert-major\|moe_forward" $OUT/ab/fwd-qe-1.txt | cut -c1-400 | head -2
[ $(($(date +%s) - start)) -lt 150 ] && {
  M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
  timeout 100 ncu --clock-control none -k regex:persistent_kernel --launch-skip 4 -c 2 --metrics $M "$K" bench moe --model qwen3-235b --tokens 4096 \
    --skip-cublas --reps 3 --gemm1-expert-major 1 > $OUT/ab/ncu-qe.txt 2>&1
  echo "ncu rc=$? $(el)"; grep -E "gpu__time|dram__bytes_read|hmma|lts__throughput|hit_rate" $OUT/ab/ncu-qe.txt | awk '{print $1, $NF}' | paste - - - - - | head
}
tar czf $OUT/ab.tgz -C $OUT ab t && rm -rf $OUT/ab $OUT/t
echo "done $(el)"
