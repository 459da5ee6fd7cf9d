#!/usr/bin/env bash
# Issue 4's multi-GPU measurement: `kosmos bench tp --transport nccl` with one process per GPU
# (RANK / WORLD_SIZE / LOCAL_RANK / KOSMOS_NCCL_ID_FILE) for every model/op of the issue, then
# baseline (c), PyTorch symmetric-memory async-TP (bench/torch_async_tp.py under torchrun).
#
# Usage: scripts/run_multigpu_bench.sh [W] [OUT_DIR]      (default W = 8, OUT_DIR = bench/results/multigpu-W<W>)
#   env: BUILD_DIR (default build; the binary is $BUILD_DIR/kosmos), REPS (default 20),
#        KOSMOS_NCCL_LIB_DIR (libnccl folder to put first), SKIP_TORCH=1 (kosmos only),
#        CASES (override the case list, e.g. "llama3-70b:ag_gemm llama3-70b:gemm_rs:bwd")
# W = 1 runs everything on one GPU (a one-rank communicator): the smoke test.
# Skips (exit 0, with a message) when fewer than W GPUs are visible.
# NCCL: same selection as scripts/run_multigpu.sh (the torch wheel's libnccl first on LD_LIBRARY_PATH);
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
set -u
W=${1:-8}
OUT_DIR=${2:-bench/results/multigpu-W$W}
BUILD_DIR=${BUILD_DIR:-build}
BIN=${BIN:-$BUILD_DIR/kosmos}
REPS=${REPS:-20}
[[ $W =~ ^[0-9]+$ ]] && (( W >= 1 )) || { echo "run_multigpu_bench: W must be a positive integer, got '$W'" >&2; exit 2; }
[[ -x $BIN ]] || { echo "run_multigpu_bench: $BIN not found (build the kosmos_cli target)" >&2; exit 2; }

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if (( NGPU < W )); then
  echo "run_multigpu_bench: skipped: needs $W GPUs, $NGPU visible"
  exit 0
fi

NCCL_DIR=${KOSMOS_NCCL_LIB_DIR:-$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0] + '/lib')" 2>/dev/null || true)}
[[ -n $NCCL_DIR && -d $NCCL_DIR ]] && export LD_LIBRARY_PATH="$NCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0                 # kosmos never uses NVLink multicast
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 # nor does the torch baseline
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
mkdir -p "$OUT_DIR" || exit 2
LOG_DIR="$OUT_DIR/logs"
mkdir -p "$LOG_DIR"
echo "run_multigpu_bench: W=$W, $NGPU GPU(s) visible, libnccl from ${NCCL_DIR:-system}, results in $OUT_DIR"

# model:op[:bwd] — issue 4's list: llama3-70b every op and both backward passes; the other models
# and the small-M case (M = 2048, N = 3584, K = 8192) forward.
DEFAULT_CASES="llama3-70b:ag_gemm llama3-70b:gemm_rs llama3-70b:gemm_ar llama3-70b:ag_gemm:bwd llama3-70b:gemm_rs:bwd"
for m in gpt3-175b llama3-405b llama3-8b small-m; do
  DEFAULT_CASES+=" $m:ag_gemm $m:gemm_rs $m:gemm_ar"
done
CASES=${CASES:-$DEFAULT_CASES}

status=0
ran=0
failed=()
for CASE in $CASES; do
  IFS=: read -r MODEL OP BWD <<<"$CASE"
  NAME="tp-nccl-W$W-$MODEL-$OP${BWD:+-bwd}"
  ARGS=(bench tp --transport nccl --model "$MODEL" --op "$OP" --reps "$REPS" --json "$OUT_DIR/$NAME.json")
  [[ -n $BWD ]] && ARGS+=(--backward)
  ID_FILE=$(mktemp -u "${TMPDIR:-/tmp}/kosmos_nccl_id.XXXXXX")   # fresh per launch
  echo "== $NAME"
  pids=()
  for (( r = 0; r < W; ++r )); do
    RANK=$r WORLD_SIZE=$W LOCAL_RANK=$r KOSMOS_NCCL_ID_FILE=$ID_FILE \
      timeout 600 "$BIN" "${ARGS[@]}" >"$LOG_DIR/$NAME.rank$r.log" 2>&1 &
    pids+=($!)
  done
  c_status=0
  for (( r = 0; r < W; ++r )); do
    wait "${pids[$r]}" || c_status=1
  done
  rm -f "$ID_FILE"
  ran=$((ran + 1))
  if (( c_status == 0 )); then
    grep -v '^\[bench tp nccl\]' "$LOG_DIR/$NAME.rank0.log"
  else
    status=1
    failed+=("$NAME")
    echo "$NAME FAILED; last lines of each rank's log ($LOG_DIR/$NAME.rank*.log):"
    for (( r = 0; r < W; ++r )); do echo "-- rank $r"; tail -5 "$LOG_DIR/$NAME.rank$r.log"; done
  fi
done

if [[ ${SKIP_TORCH:-0} == 1 ]]; then
  echo "== torch async-TP baseline (c): skipped (SKIP_TORCH=1)"
elif ! python3 -c "import torch" 2>/dev/null; then
  echo "== torch async-TP baseline (c): skipped (python3 cannot import torch)"
else
  echo "== torch async-TP baseline (c)"
  TORCHRUN=(python3 -m torch.distributed.run)
  MODELS=$(for CASE in $CASES; do echo "${CASE%%:*}"; done | awk '!seen[$0]++' | paste -sd, -)
  "${TORCHRUN[@]}" --standalone --nproc-per-node "$W" bench/torch_async_tp.py \
      --models "$MODELS" --ops ag_gemm,gemm_rs --reps "$REPS" --json "$OUT_DIR/torch-async-tp-W$W.json" \
      >"$LOG_DIR/torch-async-tp-W$W.log" 2>&1
  t_status=$?
  grep -v '^\s*$' "$LOG_DIR/torch-async-tp-W$W.log" | grep -E 'async-TP|error|Error' | head -40
  if (( t_status != 0 )); then
    status=1
    failed+=("torch-async-tp")
    echo "torch async-TP FAILED (log: $LOG_DIR/torch-async-tp-W$W.log)"; tail -20 "$LOG_DIR/torch-async-tp-W$W.log"
  fi
fi

echo "run_multigpu_bench: $ran kosmos case(s) at W=$W; failed: ${failed[*]:-none}; JSON in $OUT_DIR"
exit $status
