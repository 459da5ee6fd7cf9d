#!/bin/bash
# Several builds of kosmos in one device call: binaries of each variant (a branch or commit) travel
# compressed under build/variants/NAME/ (xz: ~1.2 MB per binary instead of ~12 MB, so four
# variants fit the 64 MiB carry), and one call tests one variant or times several against each
# other, processes alternated round by round.
#
#   scripts/variants.sh pack NAME            here, after building NAME's checkout: build/kosmos,
#                                            build/tests/kosmos_gpu_tests, build/kosmos_nccl_transport_tests,
#                                            build/gemm_engine_test, build/gemm_engine_bench (those newer
#                                            than build/libkosmos.a)
#                                            -> build/variants/NAME/*.xz, with its commit
#   scripts/variants.sh list                 what is packed
#   scripts/variants.sh tests NAME           on the device: scripts/device_batch.sh's gpu-tests, gemm-tests
#                                            and nccl-tests steps on NAME's binaries (those packed)
#   scripts/variants.sh ab NAME1 NAME2 ...   on the device: `bench moe` cases (CASES, default below),
#                                            ROUNDS rounds (default 2), the first with --phase-times;
#                                            one line per run: fused / unfused ms, phase times.
#                                            NAME@VAR=VALUE runs NAME's binary with that environment
#                                            variable set (an A/B inside one build); NAME@A=1@B=2
#                                            sets both
#
# Device call (carry only the packed binaries):
#   run(command="scripts/variants.sh tests all-candidates", carry=["build/variants"])
#   run(command="ROUNDS=2 scripts/variants.sh ab main bulk-route dw-pingpong all-candidates",
#       carry=["build/variants"])
# Logs: $OUT/results.tgz (tests, as device_batch.sh packs them) or $OUT/variants-logs.tgz (ab: every
# run's full output); the summary on stdout.
set -u
V=build/variants
cmd=${1:-}
shift || true

# NAME BIN -> path of the unpacked binary, at its place in a build tree under /tmp/kosmos-variants/NAME
# (unpacked again when the packed one is newer: a warm machine keeps /tmp between calls, and NAME
# may have been packed again since).
unpack() {
  local name=$1 bin=$2 rel=$2
  [ "$bin" = kosmos_gpu_tests ] && rel=tests/$bin
  local dst=/tmp/kosmos-variants/$name/$rel
  mkdir -p "$(dirname "$dst")"
  if [ ! -x "$dst" ] || [ "$V/$name/$bin.xz" -nt "$dst" ]; then
    [ -f "$V/$name/$bin.xz" ] || { echo "variants: $V/$name/$bin.xz is missing (scripts/variants.sh list)" >&2; return 1; }
    if command -v xz > /dev/null; then
      xz -dc "$V/$name/$bin.xz" > "$dst"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$V/$name/$bin.xz" "$dst"
    fi
    chmod +x "$dst"
  fi
  echo "$dst"
}

case "$cmd" in
  pack)
    name=${1:?"usage: scripts/variants.sh pack NAME"}
    mkdir -p "$V/$name"
    rm -f "$V/$name"/*.xz
    for f in build/kosmos build/tests/kosmos_gpu_tests build/kosmos_nccl_transport_tests build/gemm_engine_test build/gemm_engine_bench; do
      [ -x "$f" ] || continue
      # A binary older than the library was linked from another checkout: leave it out.
      if [ build/libkosmos.a -nt "$f" ]; then echo "  $f is older than build/libkosmos.a: not packed" >&2; continue; fi
      xz -T2 -6 -c "$f" > "$V/$name/$(basename "$f").xz"
    done
    { git rev-parse HEAD; git status --short | grep -v '^??' | head -5; } > "$V/$name/commit.txt"
    echo "packed $name ($(head -1 "$V/$name/commit.txt")): $(ls "$V/$name" | tr '\n' ' ')"
    ;;
  unpack)  # NAME BIN: the path of NAME's unpacked BIN (on the device)
    unpack "$1" "$2"
    ;;
  list)
    for d in "$V"/*/; do
      [ -d "$d" ] && echo "$(basename "$d"): $(head -1 "$d/commit.txt") $(cd "$d" && ls *.xz | tr '\n' ' ')"
    done
    du -sh "$V" 2> /dev/null
    ;;
  tests)
    name=${1:?"usage: scripts/variants.sh tests NAME"}
    echo "== $name ($(head -1 $V/$name/commit.txt))"
    steps=()
    unpack "$name" kosmos_gpu_tests > /dev/null && steps+=(gpu-tests)
    unpack "$name" gemm_engine_test > /dev/null 2>&1 && steps+=(gemm-tests)
    unpack "$name" kosmos_nccl_transport_tests > /dev/null 2>&1 && steps+=(nccl-tests)
    [ ${#steps[@]} -gt 0 ] || exit 1
    KOSMOS_BIN=/tmp/kosmos-variants/$name "$(dirname "$0")/device_batch.sh" "${steps[@]}"
    ;;
  ab)
    [ $# -ge 1 ] || { echo "usage: scripts/variants.sh ab NAME..." >&2; exit 2; }
    L=/tmp/variants-logs; mkdir -p $L
    trap '[ -n "${OUT:-}" ] && tar czf "$OUT/variants-logs.tgz" -C "$L" .' EXIT
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
    for name in "$@"; do unpack "${name%%@*}" kosmos > /dev/null || exit 1; done
    # case = tag:bench moe arguments (spaces as commas)
    CASES=${CASES:-"qf:--model,qwen3-235b,--tokens,4096,--skip-cublas df:--model,deepseek-v3,--tokens,4096,--skip-cublas qb:--model,qwen3-235b,--tokens,4096,--backward,--save-activations q128:--model,qwen3-235b,--tokens,128,--skip-cublas"}
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for c in $CASES; do
        tag=${c%%:*}; args=${c#*:}; args=${args//,/ }
        for name in "$@"; do
          ph=""; [ "$round" = 1 ] && ph=--phase-times
          # shellcheck disable=SC2086
          envs=(); [[ $name == *@* ]] && IFS=@ read -ra envs <<< "${name#*@}"
          timeout 300 env "${envs[@]}" "$(unpack "${name%%@*}" kosmos)" bench moe $args $ph > $L/$tag-$name-$round.txt 2>&1
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
    sed -n "2,/^set -u/p" "$0" | sed '$d'
    exit 2
    ;;
esac
