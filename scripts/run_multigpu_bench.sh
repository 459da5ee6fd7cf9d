#!/usr/bin/env bash
# The multi-GPU measurements, one process per GPU (RANK / WORLD_SIZE / LOCAL_RANK /
# KOSMOS_NCCL_ID_FILE): issue 4's `kosmos bench tp --transport nccl` for every model/op of the
# issue and issue 5's `kosmos bench moe --transport nccl` (forward, and backward in training mode),
# then the PyTorch baselines under torchrun: symmetric-memory async-TP (bench/torch_async_tp.py)
# and the expert-parallel MoE pipeline on the same routing (bench/torch_moe_ep.py).
#
# Usage: scripts/run_multigpu_bench.sh [W] [OUT_DIR]      (default W = 8, OUT_DIR = $OUT/multigpu-W<W> when
#        $OUT is set -- the device tool brings $OUT back --, else bench/results/multigpu-W<W>)
#   env: BUILD_DIR (default build; the binary is $BUILD_DIR/kosmos), REPS (default 20),
#        KOSMOS_NCCL_LIB_DIR (libnccl folder to put first), SKIP_TORCH=1 (kosmos only),
#        CASES (override the TP case list, e.g. "llama3-70b:ag_gemm llama3-70b:gemm_rs:bwd"; "" for none),
#        MOE_CASES (override the MoE case list, e.g. "qwen3-235b:4096 deepseek-v3:4096:bwd"; "" for none),
#        TRACE=1 (the MoE cases also write a trace SVG per rank; their times then include tracing),
#        RANK_TIMEOUT (s per process, default 240; when one rank fails the others are stopped at once,
#        scripts/ranks.sh), TORCH_TIMEOUT (s per torchrun launch, default 300)
# The default lists take far longer than one 10-minute device command at W = 8: pick a few cases
# per call with CASES / MOE_CASES.
# W = 1 runs everything on one GPU (a one-rank communicator): the smoke test.
# Skips (exit 0, with a message) when fewer than W GPUs are visible.
# NCCL: same selection as scripts/run_multigpu.sh (the torch wheel's libnccl first on LD_LIBRARY_PATH);
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
set -u
source "$(dirname "$0")/ranks.sh"
W=${1:-8}
OUT_DIR=${2:-${OUT:+$OUT/multigpu-W$W}}
OUT_DIR=${OUT_DIR:-bench/results/multigpu-W$W}
BUILD_DIR=${BUILD_DIR:-build}
BIN=${BIN:-$BUILD_DIR/kosmos}
REPS=${REPS:-20}
[[ $W =~ ^[0-9]+$ ]] && (( W >= 1 )) || { echo "run_multigpu_bench: W must be a positive integer, got '$W'" >&2; exit 2; }
[[ -x $BIN ]] || { echo "run_multigpu_bench: $BIN not found (build the kosmos_cli target)" >&2; exit 2; }

NGPU=$(visible_gpus)
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
CASES=${CASES-$DEFAULT_CASES}
# model:tokens[:bwd] — issue 5's shapes; bwd = the training-mode backward (--save-activations).
DEFAULT_MOE_CASES="qwen3-235b:4096 qwen3-235b:4096:bwd deepseek-v3:4096 deepseek-v3:4096:bwd qwen3-235b:128 deepseek-v3:128"
MOE_CASES=${MOE_CASES-$DEFAULT_MOE_CASES}

status=0
ran=0
failed=()
# run_case NAME ARGS...: one process per GPU running `kosmos ARGS...`; logs per rank.
run_case() {
  local NAME=$1
  shift
  echo "== $NAME"
  local c_status=0
  launch_ranks "$W" "$LOG_DIR/$NAME" "$BIN" "$@" || c_status=1
  ran=$((ran + 1))
  if (( c_status == 0 )); then
    grep -Ev '^\[bench (tp|moe) nccl\]' "$LOG_DIR/$NAME.rank0.log"
  else
    status=1
    failed+=("$NAME")
    echo "$NAME FAILED: rank(s) ${FAILED_RANKS[*]}; last lines of each rank's log ($LOG_DIR/$NAME.rank*.log):"
    for (( r = 0; r < W; ++r )); do echo "-- rank $r"; tail -5 "$LOG_DIR/$NAME.rank$r.log"; done
  fi
}

for CASE in $CASES; do
  IFS=: read -r MODEL OP BWD <<<"$CASE"
  NAME="tp-nccl-W$W-$MODEL-$OP${BWD:+-bwd}"
  ARGS=(bench tp --transport nccl --model "$MODEL" --op "$OP" --reps "$REPS" --json "$OUT_DIR/$NAME.json")
  [[ -n $BWD ]] && ARGS+=(--backward)
  run_case "$NAME" "${ARGS[@]}"
done

for CASE in $MOE_CASES; do
  IFS=: read -r MODEL TOKENS BWD <<<"$CASE"
  NAME="moe-nccl-W$W-$MODEL-t$TOKENS${BWD:+-bwd}"
  ARGS=(bench moe --transport nccl --model "$MODEL" --tokens "$TOKENS" --reps "$REPS" --json "$OUT_DIR/$NAME.json")
  [[ -n $BWD ]] && ARGS+=(--backward --save-activations)
  [[ ${TRACE:-0} == 1 ]] && ARGS+=(--trace-svg "$OUT_DIR/$NAME.svg")   # one SVG per rank; times include tracing
  run_case "$NAME" "${ARGS[@]}"
done

if [[ ${SKIP_TORCH:-0} == 1 ]]; then
  echo "== torch baselines (async-TP, EP MoE): skipped (SKIP_TORCH=1)"
elif ! python3 -c "import torch" 2>/dev/null; then
  echo "== torch baselines (async-TP, EP MoE): skipped (python3 cannot import torch)"
else
  TORCHRUN=(python3 -m torch.distributed.run)
  # torch_run NAME LOG PATTERN SCRIPT ARGS...: one torchrun launch at W, its log in LOG, the lines
  # matching PATTERN shown; a failure is counted and its log's tail shown.
  torch_run() {
    local name=$1 log=$2 pattern=$3
    shift 3
    timeout -k 10 "${TORCH_TIMEOUT:-300}" "${TORCHRUN[@]}" --standalone --nproc-per-node "$W" "$@" >>"$log" 2>&1
    local t_status=$?
    (( t_status == 124 )) && echo "$name: TIMEOUT after ${TORCH_TIMEOUT:-300} s (TORCH_TIMEOUT)" | tee -a "$log"
    grep -v '^\s*$' "$log" | grep -E "$pattern" | grep -v '^\[' | head -40
    if (( t_status != 0 )); then
      status=1
      failed+=("$name")
      echo "$name FAILED (log: $log)"; tail -20 "$log"
    fi
  }
  if [[ -n $CASES ]]; then
    echo "== torch async-TP baseline (c)"
    MODELS=$(for CASE in $CASES; do echo "${CASE%%:*}"; done | awk '!seen[$0]++' | paste -sd, -)
    : >"$LOG_DIR/torch-async-tp-W$W.log"
    torch_run torch-async-tp "$LOG_DIR/torch-async-tp-W$W.log" 'async-TP|error|Error' bench/torch_async_tp.py \
        --models "$MODELS" --ops ag_gemm,gemm_rs --reps "$REPS" --json "$OUT_DIR/torch-async-tp-W$W.json"
  fi
  # The expert-parallel MoE pipeline on the exact routing of each MoE case (dumped without a GPU).
  for CASE in $MOE_CASES; do
    IFS=: read -r MODEL TOKENS BWD <<<"$CASE"
    NAME="torch-moe-ep-W$W-$MODEL-t$TOKENS${BWD:+-bwd}"
    ROUTING="$OUT_DIR/routing-W$W-$MODEL-t$TOKENS.json"
    echo "== $NAME"
    # no GPU visible: the routing only, not the virtual-rank bench
    CUDA_VISIBLE_DEVICES= "$BIN" bench moe --model "$MODEL" --tokens "$TOKENS" --world "$W" --dump-routing "$ROUTING" >"$LOG_DIR/$NAME.log" 2>&1 || true
    T_ARGS=(--routing "$ROUTING" --reps "$REPS" --json "$OUT_DIR/$NAME.json")
    [[ -n $BWD ]] && T_ARGS+=(--backward)
    torch_run "$NAME" "$LOG_DIR/$NAME.log" 'torch|ms|error|Error' bench/torch_moe_ep.py "${T_ARGS[@]}"
  done
fi

echo "run_multigpu_bench: $ran kosmos case(s) at W=$W; failed: ${failed[*]:-none}; JSON in $OUT_DIR"
exit $status
