#!/bin/bash
# Several builds of kosmos in one device call: binaries of each variant (a branch or commit) travel
# compressed under build/variants/NAME/ (xz: ~1.2 MB per binary instead of ~12 MB, so four
# variants fit the 64 MiB carry), and one call tests one variant or times several against each
# other, processes alternated round by round.
#
#   scripts/variants.sh pack NAME            here, after building NAME's checkout: build/kosmos,
#                                            build/tests/kosmos_gpu_tests, build/kosmos_nccl_transport_tests,
#                                            build/gemm_engine_test (those newer than build/libkosmos.a)
#                                            -> build/variants/NAME/*.xz, with its commit
#   scripts/variants.sh list                 what is packed
#   scripts/variants.sh tests NAME           on the device: the GPU suite in 4 shards, then the GEMM engine
#                                            and nccl tests (those packed)
#   scripts/variants.sh ab NAME1 NAME2 ...   on the device: `bench moe` cases (CASES, default below),
#                                            ROUNDS rounds (default 2), the first with --phase-times;
#                                            one line per run: fused / unfused ms, phase times
#
# Device call (carry only the packed binaries):
#   run(command="scripts/variants.sh tests all-candidates", carry=["build/variants"])
#   run(command="ROUNDS=2 scripts/variants.sh ab main bulk-route dw-pingpong all-candidates",
#       carry=["build/variants"])
# Logs: $OUT/variants-logs.tgz (every run's full output), the summary on stdout.
set -u
V=build/variants
cmd=${1:-}
shift || true

unpack() {  # NAME BIN -> path of the unpacked binary (again when the packed one is newer: a warm
            # machine keeps /tmp between calls, and NAME may have been packed again since)
  local name=$1 bin=$2 dst=/tmp/kosmos-variants/$1
  mkdir -p "$dst"
  if [ ! -x "$dst/$bin" ] || [ "$V/$name/$bin.xz" -nt "$dst/$bin" ]; then
    [ -f "$V/$name/$bin.xz" ] || { echo "variants: $V/$name/$bin.xz is missing (scripts/variants.sh list)" >&2; return 1; }
    if command -v xz > /dev/null; then
      xz -dc "$V/$name/$bin.xz" > "$dst/$bin"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$V/$name/$bin.xz" "$dst/$bin"
    fi
    chmod +x "$dst/$bin"
  fi
  echo "$dst/$bin"
}

logs_to_out() {
  [ -n "${OUT:-}" ] && tar czf "$OUT/variants-logs.tgz" -C "$L" . 2> /dev/null
}

case "$cmd" in
  pack)
    name=${1:?"usage: scripts/variants.sh pack NAME"}
    mkdir -p "$V/$name"
    rm -f "$V/$name"/*.xz
    for f in build/kosmos build/tests/kosmos_gpu_tests build/kosmos_nccl_transport_tests build/gemm_engine_test; do
      [ -x "$f" ] || continue
      # A binary older than the library was linked from another checkout: leave it out.
      if [ build/libkosmos.a -nt "$f" ]; then echo "  $f is older than build/libkosmos.a: not packed" >&2; continue; fi
      xz -T2 -6 -c "$f" > "$V/$name/$(basename "$f").xz"
    done
    { git rev-parse HEAD; git status --short | grep -v '^??' | head -5; } > "$V/$name/commit.txt"
    echo "packed $name ($(head -1 "$V/$name/commit.txt")): $(ls "$V/$name" | tr '\n' ' ')"
    ;;
  list)
    for d in "$V"/*/; do
      [ -d "$d" ] && echo "$(basename "$d"): $(head -1 "$d/commit.txt") $(cd "$d" && ls *.xz | tr '\n' ' ')"
    done
    du -sh "$V" 2> /dev/null
    ;;
  tests)
    name=${1:?"usage: scripts/variants.sh tests NAME"}
    L=/tmp/variants-logs; mkdir -p $L; trap logs_to_out EXIT
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
    tests=$(unpack "$name" kosmos_gpu_tests) || exit 1
    ( for i in 0 1 2 3; do
        GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 400 "$tests" > $L/$name-gpu-$i.log 2>&1 &
      done; wait )
    echo "== $name: GPU suite ($(head -1 $V/$name/commit.txt))"
    grep -hE "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test" $L/$name-gpu-*.log
    grep -hE "^\[  FAILED  \] [A-Za-z]" $L/$name-gpu-*.log | sort -u
    grep -h "Failure" -A5 $L/$name-gpu-*.log | head -40
    if engine_tests=$(unpack "$name" gemm_engine_test 2> /dev/null); then
      timeout 300 "$engine_tests" > $L/$name-engine.log 2>&1
      echo "== $name: GEMM engine tests"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] [A-Za-z]" $L/$name-engine.log
    fi
    if nccl_tests=$(unpack "$name" kosmos_nccl_transport_tests 2> /dev/null); then
      nccl_dir=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2> /dev/null)
      LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0 timeout 300 "$nccl_tests" \
        > $L/$name-nccl.log 2>&1
      echo "== $name: nccl tests"
      grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] [A-Za-z]" $L/$name-nccl.log
    fi
    ;;
  ab)
    [ $# -ge 1 ] || { echo "usage: scripts/variants.sh ab NAME..." >&2; exit 2; }
    L=/tmp/variants-logs; mkdir -p $L; trap logs_to_out EXIT
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
    for name in "$@"; do unpack "$name" kosmos > /dev/null || exit 1; done
    # case = tag:bench moe arguments (spaces as commas)
    CASES=${CASES:-"qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations q128:--model,qwen3-235b,--tokens,128,--skip-cublas"}
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for c in $CASES; do
        tag=${c%%:*}; args=${c#*:}; args=${args//,/ }
        for name in "$@"; do
          ph=""; [ "$round" = 1 ] && ph=--phase-times
          # shellcheck disable=SC2086
          timeout 300 "$(unpack "$name" kosmos)" bench moe $args $ph > $L/$tag-$name-$round.txt 2>&1
          res=$(grep -E '^  (un)?fused( backward)? \(' $L/$tag-$name-$round.txt | awk '{printf "%s=%s ", $1, $(NF-2)}')
          # no times: say why (the run's last line)
          [ -n "$res" ] || res="NO RESULT: $(tail -1 $L/$tag-$name-$round.txt)"
          echo "$tag $name r$round: $res $(grep -E 'FAIL|differ|rror' $L/$tag-$name-$round.txt | head -2)"
          grep "each launch alone" $L/$tag-$name-$round.txt | sed 's/^ */    /'
        done
      done
    done
    ;;
  *)
    sed -n 2,22p "$0"
    exit 2
    ;;
esac
