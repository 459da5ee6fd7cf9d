#!/usr/bin/env bash
# Runs the multi-GPU transport tests (label multigpu) in both launch modes:
#   1. one process driving all visible GPUs   (SingleProcess.Ring2/4/8 over NCCL; SingleProcess.PeerTransport*
#      over plain CUDA peer access, every visible GPU up to 8; each skips when fewer GPUs)
#   2. one process per GPU via RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE, for W = 2, 4, 8
#      up to the number of visible GPUs (EnvLaunch.Ring, then the fused TP ops: TpMultiGpu.*)
# Usage: scripts/run_multigpu.sh [BUILD_DIR]   (default: build; the binary is BUILD_DIR/kosmos_multigpu_tests)
# NCCL: the binary is built against NCCL 2.28.9 headers; when the Python env has the nvidia-nccl wheel,
# its libnccl is put first on LD_LIBRARY_PATH (override with KOSMOS_NCCL_LIB_DIR). The transport
# refuses a libnccl whose major.minor differs from the headers.
set -u
BUILD_DIR=${1:-build}
BIN=${BIN:-$BUILD_DIR/kosmos_multigpu_tests}
[[ -x $BIN ]] || { echo "run_multigpu: $BIN not found (build the kosmos_multigpu_tests target)" >&2; exit 2; }

NCCL_DIR=${KOSMOS_NCCL_LIB_DIR:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null || true)}
[[ -n $NCCL_DIR && -d $NCCL_DIR ]] && export LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0            # kosmos never uses NVLink multicast
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "run_multigpu: $NGPU GPU(s) visible, libnccl from ${NCCL_DIR:-system}"
status=0

echo "== mode 1: one process, all GPUs"
"$BIN" --gtest_filter='SingleProcess.*' || status=1

echo "== mode 2: one process per GPU"
for FILTER in 'EnvLaunch.*' 'TpMultiGpu.*'; do   # each suite makes its own communicator: own launch
for W in 2 4 8; do
  if (( W > NGPU )); then echo "$FILTER W=$W: skipped (needs $W GPUs, $NGPU visible)"; continue; fi
  ID_FILE=$(mktemp -u "${TMPDIR:-/tmp}/kosmos_nccl_id.XXXXXX")   # fresh per launch
  LOG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kosmos_multigpu_W$W.XXXXXX")
  pids=()
  for (( r = 0; r < W; ++r )); do
    RANK=$r WORLD_SIZE=$W LOCAL_RANK=$r KOSMOS_NCCL_ID_FILE=$ID_FILE \
      timeout 300 "$BIN" --gtest_filter="$FILTER" >"$LOG_DIR/rank$r.log" 2>&1 &
    pids+=($!)
  done
  w_status=0
  for (( r = 0; r < W; ++r )); do
    wait "${pids[$r]}" || { w_status=1; echo "W=$W rank $r FAILED (log: $LOG_DIR/rank$r.log)"; tail -20 "$LOG_DIR/rank$r.log"; }
  done
  rm -f "$ID_FILE"
  if (( w_status == 0 )); then echo "$FILTER W=$W: all $W ranks passed"; grep -h '\[ info \]' "$LOG_DIR"/rank*.log; else status=1; fi
done
done
exit $status
