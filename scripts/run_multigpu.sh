#!/usr/bin/env bash
# Runs the multi-GPU transport tests (label multigpu) in both launch modes:
#   1. one process driving all visible GPUs   (SingleProcess.Ring2/4/8 over NCCL; SingleProcess.PeerTransport*
#      over plain CUDA peer access, every visible GPU up to 8; each skips when fewer GPUs)
#   2. one process per GPU via RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE, for W = 2, 4, 8
#      up to the number of visible GPUs (EnvLaunch.Ring, then the fused TP ops: TpMultiGpu.*)
# Usage: scripts/run_multigpu.sh [BUILD_DIR]   (default: build; the binary is BUILD_DIR/kosmos_multigpu_tests)
# Logs: under $LOG_ROOT (default $OUT when set -- the device tool brings $OUT back --, else $TMPDIR or /tmp).
# Limits: RANK_TIMEOUT (s, default 240) per process; when one rank fails the others are stopped at once
# (scripts/ranks.sh), so a failure costs seconds, not the limit.
# NCCL: the binary is built against NCCL 2.28.9 headers; when the Python env has the nvidia-nccl wheel,
# its libnccl is put first on LD_LIBRARY_PATH (override with KOSMOS_NCCL_LIB_DIR). The transport
# refuses a libnccl whose major.minor differs from the headers.
set -u
source "$(dirname "$0")/ranks.sh"
BUILD_DIR=${1:-build}
BIN=${BIN:-$BUILD_DIR/kosmos_multigpu_tests}
[[ -x $BIN ]] || { echo "run_multigpu: $BIN not found (build the kosmos_multigpu_tests target)" >&2; exit 2; }

NCCL_DIR=${KOSMOS_NCCL_LIB_DIR:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null || true)}
[[ -n $NCCL_DIR && -d $NCCL_DIR ]] && export LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0            # kosmos never uses NVLink multicast
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

NGPU=$(visible_gpus)
LOG_ROOT=${LOG_ROOT:-${OUT:-${TMPDIR:-/tmp}}}
mkdir -p "$LOG_ROOT"
echo "run_multigpu: $NGPU GPU(s) visible, libnccl from ${NCCL_DIR:-system}, logs under $LOG_ROOT"
status=0

echo "== mode 1: one process, all GPUs"
timeout -k 10 "${RANK_TIMEOUT:-240}" "$BIN" --gtest_filter='SingleProcess.*' 2>&1 | tee "$LOG_ROOT/multigpu-single-process.log"
rc=${PIPESTATUS[0]}
(( rc == 124 )) && echo "mode 1: TIMEOUT after ${RANK_TIMEOUT:-240} s (RANK_TIMEOUT)"
(( rc != 0 )) && status=1

echo "== mode 2: one process per GPU"
for FILTER in 'EnvLaunch.*' 'TpMultiGpu.*'; do   # each suite makes its own communicator: own launch
for W in 2 4 8; do
  if (( W > NGPU )); then echo "$FILTER W=$W: skipped (needs $W GPUs, $NGPU visible)"; continue; fi
  LOG_DIR=$(mktemp -d "$LOG_ROOT/kosmos_multigpu_W$W.XXXXXX")
  if launch_ranks "$W" "$LOG_DIR/${FILTER%%.*}" "$BIN" --gtest_filter="$FILTER"; then
    echo "$FILTER W=$W: all $W ranks passed"; grep -h '\[ info \]' "$LOG_DIR"/*.log
  else
    status=1
    echo "$FILTER W=$W FAILED: rank(s) ${FAILED_RANKS[*]} (logs: $LOG_DIR)"
    for f in "$LOG_DIR"/*.log; do echo "-- $f"; tail -20 "$f"; done
  fi
done
done
exit $status
