#!/bin/bash
# Shared pieces of the one-off device-call scripts (scripts/call*.sh), sourced by them:
#   . "$(dirname "$0")/device_lib.sh"
# device_start     -- the call's clock (el prints the seconds since), the card in $OUT/gpu.txt, and
#                     $g = h200 or h100 for result names.
# moe_final_form V TAG
#                  -- with variant V's kosmos (scripts/variants.sh): the MoE forward against the
#                     cuBLAS grouped pipeline on the four issue shapes (Qwen3-235B / DeepSeek-V3
#                     proxies, T = 4096 / 128), then the saved backward against torch autograd on the
#                     same routing (T = 4096); $OUT/fwd.tgz and $OUT/bwd.tgz, JSON named
#                     moe-*-$g-TAG.json.
# gtest_step NAME LIMIT BIN FILTER
#                  -- BIN's tests matching FILTER under a time limit, log $OUT/NAME.txt; prints the
#                     summary line(s) and the first failures.
# moe_times FILE   -- one `bench moe` log's times (fused= unfused=, the backward's too) and error lines.
# moe_rounds BIN ROUNDS DIR "TAG:ARGS ..." [EXTRA...]
#                  -- each case (ARGS: `bench moe` arguments, commas for spaces) run once per round,
#                     cases alternated, with EXTRA appended; logs DIR/fwd-TAG-ROUND.txt; one line each.
# grouped_carry_table V TAG
#                  -- issue 3's grouped case with V's gemm_engine_bench, B [N, K] and [K, N], with
#                     --compare-carry, then torch._grouped_mm on the same group sizes (uniform
#                     operands); JSON and logs under $OUT/gemm (gemm-engine-grouped-*-$g-TAG.json).
# call_start V      -- a call script's common start: device_start, K and T (variant V's kosmos and GPU
#                     tests), the `bench moe` argument sets Q / D (the Qwen3 / DeepSeek-V3 proxies at
#                     T = 4096, commas for spaces) and B (the saved backward), $OUT/x
# ncu_summary FILE  -- one line per kernel of an ncu log taken with $NCU_METRICS (duration, tensor
#                     pipe, L2 throughput and sectors, hit rate, DRAM read / write)
# dense_gemm V NAME -- variant V's `bench gemm` into $OUT/gemm/NAME.{json,txt}
# issue3_tables V TAG -- grouped_carry_table, then dense_gemm; $OUT/gemm.tgz
# dense_gemm_ab TAG V... -- dense_gemm of each variant, twice in alternation; $OUT/gemm-ab.tgz
# moe_ab V...      -- `bench moe` A/B of the variants (scripts/variants.sh ab; ROUNDS, CASES as there,
#                     default cases: Qwen3 forward and saved backward, DeepSeek-V3 forward at T = 4096
#                     and 128); $OUT/ab.tgz
# suite_step V      -- the whole GPU suite, engine and NCCL tests of variant V (each shard limited to
#                     TEST_TIMEOUT s, 300 by default); $OUT/tests-V.tgz
set -u

device_start() {
  start=$(date +%s)
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
  g=$(grep -q H200 $OUT/gpu.txt && echo h200 || echo h100)
}
el() { echo "($(($(date +%s) - start)) s)"; }

call_start() {
  device_start
  V=$1
  K=$(scripts/variants.sh unpack "$V" kosmos) || exit 1
  T=$(scripts/variants.sh unpack "$V" kosmos_gpu_tests) || exit 1
  Q="--model,qwen3-235b,--tokens,4096"; D="--model,deepseek-v3,--tokens,4096"; B="--backward,--save-activations,--reps,10"
  mkdir -p $OUT/x
}

suite_step() {
  TEST_TIMEOUT=${TEST_TIMEOUT:-300} scripts/variants.sh tests "$1" 2>&1 | grep -E "PASSED|FAILED|TIMEOUT|SKIPPED \]" | sort | uniq -c | head -20
  mv $OUT/results.tgz $OUT/tests-$1.tgz; echo "suite $(el)"
}

# The call scripts' ncu metric set; ncu_summary prints one line per profiled kernel from it (ncu
# prints metrics sorted by name; the tensor pipe's comes last): duration, tensor pipe, L2
# throughput, L2 sectors read by SMs, hit rate, DRAM.
NCU_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
ncu_summary() {
  awk '/persistent_kernel|gemm_engine|nvjet|device_kernel|Kernel2|sm90/ && /\(/ {n++; name=$2}
       /gpu__time_duration.sum/ {d=$NF} /dram__bytes_read.sum/ {r=$NF" "$(NF-1)} /dram__bytes_write.sum/ {w=$NF" "$(NF-1)}
       /lts__t_sector_hit_rate.pct/ {h=$NF} /lts__throughput.avg.pct/ {l=$NF} /lts__t_sectors_srcunit_tex_op_read.sum/ {s=$NF}
       /hmma_cycles_active/ {t=$NF; printf "  #%d %-28.28s %7s ms  tensor %6s %%  L2 %6s %%  L2 sectors %15s  hit %6s %%  DRAM r %s w %s\n", n, name, d, t, l, s, h, r, w}' "$1"
}

gtest_step() {
  local name=$1 limit=$2 bin=$3 filter=$4
  timeout "$limit" "$bin" --gtest_filter="$filter" > $OUT/$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/$name.txt | tr '\n' ';') $(el)"
  grep -A3 "Failure" $OUT/$name.txt | cut -c1-300 | head -12
}

moe_times() {
  echo "$(grep -E '^  (un)?fused( backward)? \(' "$1" | awk '{printf "%s=%s ", $1, $(NF-2)}') $(grep -E 'FAIL|differ|rror' "$1" | cut -c1-120 | head -2)"
}

moe_rounds() {  # bin rounds dir "tag:arg,arg tag2@VAR=1@VAR2=0:arg ..." [extra args]: @ sets the run's environment
  local bin=$1 rounds=$2 dir=$3 cases=$4 round c tag args envs
  shift 4
  for round in $(seq 1 "$rounds"); do
    for c in $cases; do
      tag=${c%%:*}; args=${c#*:}; args=${args//,/ }
      envs=${tag#*@}; [ "$envs" = "$tag" ] && envs=; tag=${tag%%@*}
      # shellcheck disable=SC2086
      env ${envs//@/ } timeout 150 "$bin" bench moe $args "$@" > $dir/fwd-$tag-$round.txt 2>&1
      echo "$tag r$round: $(moe_times $dir/fwd-$tag-$round.txt) $(el)"
    done
  done
}

# fwd_trace_match TAG SPLIT_US "ENV=1 ..." ARGS -- one traced `bench moe` forward ($K; ARGS: commas
# for spaces, ENV: the run's environment, may be empty), its CSV gzipped under $OUT/x/TAG-trace.*,
# then its fused GEMM1 and GEMM2 tiles matched one by one against their own launches
# (scripts/trace_match.py; GEMM2's early / late boundary at SPLIT_US).
fwd_trace_match() {
  local tag=$1 split=$2 envs=$3 args=$4 f=$OUT/x/$1-trace
  # shellcheck disable=SC2086
  env $envs timeout 150 "$K" bench moe ${args//,/ } --trace-svg $f.svg > $f.txt 2>&1
  echo "$tag trace rc=$? $(el)"; grep -E "^  (fused|unfused)|differ|FAIL" $f.txt | head -4
  rm -f $f.svg; gzip -f $f.svg.csv
  python3 scripts/trace_match.py $f.svg.csv.gz 100 105 "gemm GEMM1 gate_up+SwiGLU"
  python3 scripts/trace_match.py $f.svg.csv.gz 100 106 "gemm GEMM2 down" --split-us "$split"
}

# The variant's commit for the JSON (the device's copy of the tree may carry a stale .git).
variant_commit() { head -1 "build/variants/$1/commit.txt" | cut -c1-12; }

# dense_gemm V NAME -- variant V's `bench gemm` (issue 3's eight dense shapes against cuBLAS), JSON
# and log as $OUT/gemm/NAME.{json,txt}; prints its rc, the shapes' lines and the geometric mean.
dense_gemm() {
  local v=$1 name=$2
  mkdir -p $OUT/gemm
  KOSMOS_COMMIT=$(variant_commit "$v") timeout 120 "$(scripts/variants.sh unpack "$v" kosmos)" bench gemm --reps 20 \
    --json $OUT/gemm/$name.json > $OUT/gemm/$name.txt 2>&1
  echo "bench gemm $v ($name) rc=$? $(el)"; grep -E 'x|geomean|geometric' $OUT/gemm/$name.txt | tail -12
}

issue3_tables() {
  grouped_carry_table "$1" "$2"
  dense_gemm "$1" gemm-$g-$2
  tar czf $OUT/gemm.tgz -C $OUT gemm && rm -rf $OUT/gemm
}

dense_gemm_ab() {
  local tag=$1 r v
  shift
  for r in 1 2; do
    for v in "$@"; do dense_gemm "$v" gemm-$g-$tag-$v-$r; done
  done
  tar czf $OUT/gemm-ab.tgz -C $OUT gemm && rm -rf $OUT/gemm
}

moe_ab() {
  ROUNDS=${ROUNDS:-2} CASES=${CASES:-"qf:--model,qwen3-235b,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations df:--model,deepseek-v3,--tokens,4096,--skip-cublas d128:--model,deepseek-v3,--tokens,128,--skip-cublas"} \
    scripts/variants.sh ab "$@"
  mv $OUT/variants-logs.tgz $OUT/ab.tgz; echo "ab $(el)"
}

moe_final_form() {
  local variant=$1 tag=$2 K m t f b
  K=$(scripts/variants.sh unpack "$variant" kosmos) || return 1
  export KOSMOS_COMMIT; KOSMOS_COMMIT=$(variant_commit "$variant")
  mkdir -p $OUT/fwd $OUT/bwd
  for m in qwen3-235b deepseek-v3; do
    for t in 4096 128; do
      f=$OUT/fwd/moe-$m-t$t-w1-$g-$tag
      timeout 60 "$K" bench moe --model $m --tokens $t --json $f.json > $f.txt 2>&1
      echo "$m T=$t rc=$? $(grep -E '^  (fused|unfused: cub)' $f.txt | tr -s ' ' | tr '\n' ';') $(el)"
    done
  done
  for m in qwen3-235b deepseek-v3; do
    b=$OUT/bwd/moe-bwd-$m-t4096-w1-$g-$tag
    timeout 60 "$K" bench moe --model $m --tokens 4096 --backward --save-activations --dump-routing $OUT/bwd/routing-$m.json \
      --json $b.json > $b.txt 2>&1
    echo "$m bwd rc=$? $(grep -E '^  (un)?fused( backward)? \(|training step' $b.txt | tr -s ' ' | tr '\n' ';') $(el)"
    timeout 90 python3 bench/torch_baselines.py moe --backward --routing $OUT/bwd/routing-$m.json \
      --json $OUT/bwd/torch-moe-bwd-$m-t4096-$g-$tag.json > $OUT/bwd/torch-$m.txt 2>&1
    echo "$m torch rc=$? $(grep -iE 'backward|step' $OUT/bwd/torch-$m.txt | tr '\n' ';') $(el)"
  done
  rm -f $OUT/bwd/routing-*.json
  tar czf $OUT/fwd.tgz -C $OUT fwd && tar czf $OUT/bwd.tgz -C $OUT bwd && rm -rf $OUT/fwd $OUT/bwd
}

grouped_carry_table() {
  local variant=$1 tag=$2 B l
  B=$(scripts/variants.sh unpack "$variant" gemm_engine_bench) || return 1
  export KOSMOS_COMMIT; KOSMOS_COMMIT=$(variant_commit "$variant")
  mkdir -p $OUT/gemm
  for l in nt nn; do
    timeout 100 "$B" --grouped-only --layout $l --reps 20 --compare-carry --json $OUT/gemm/gemm-engine-grouped-$l-$g-$tag.json > $OUT/gemm/grouped-$l.txt 2>&1
    echo "grouped $l rc=$? $(el)"; grep -E "^ +[0-9.]+ TF/s|as kosmos::Gemm|^moe" $OUT/gemm/grouped-$l.txt | cut -c1-140
  done
  timeout 60 "$B" --dump-groups $OUT/gemm/sizes.json --dump-only > /dev/null 2>&1
  timeout 90 python3 bench/torch_baselines.py grouped-gemm --sizes $OUT/gemm/sizes.json --data uniform --json $OUT/gemm/torch-grouped-mm-uniform-$g-$tag.json > $OUT/gemm/torch-grouped.txt 2>&1
  echo "torch grouped rc=$? $(el)"; grep -E "moe" $OUT/gemm/torch-grouped.txt
}
