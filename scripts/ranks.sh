# Sourced by scripts/run_multigpu.sh and scripts/run_multigpu_bench.sh: launching one process per GPU
# so that a failure never leaves the others waiting.
#
#   visible_gpus                      the GPUs a process here can use (CUDA_VISIBLE_DEVICES when set,
#                                     else nvidia-smi's count)
#   launch_ranks W LOG_PREFIX CMD...  W processes of CMD with RANK / WORLD_SIZE / LOCAL_RANK /
#                                     KOSMOS_NCCL_ID_FILE (a fresh id file), stdout+stderr to
#                                     LOG_PREFIX.rank<r>.log; each under `timeout -k 10 RANK_TIMEOUT`
#                                     (default 240 s). When one exits non-zero, the others are killed at
#                                     once: a peer left waiting in an NCCL collective would otherwise sit
#                                     until its own limit. Returns 0 when every rank exited 0;
#                                     FAILED_RANKS names the ranks that failed (first failure first).

visible_gpus() {
  if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
    local list=${CUDA_VISIBLE_DEVICES// /}
    [[ -z $list ]] && { echo 0; return; }
    awk -F, '{print NF}' <<<"$list"
  else
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  fi
}

launch_ranks() {
  local W=$1 prefix=$2 r pid
  shift 2
  local id_file
  id_file=$(mktemp -u "${TMPDIR:-/tmp}/kosmos_nccl_id.XXXXXX")
  declare -A rank_of=()
  local -a pids=()
  for (( r = 0; r < W; ++r )); do
    RANK=$r WORLD_SIZE=$W LOCAL_RANK=$r KOSMOS_NCCL_ID_FILE=$id_file \
      timeout -k 10 "${RANK_TIMEOUT:-240}" "$@" >"$prefix.rank$r.log" 2>&1 &
    pids+=($!)
    rank_of[$!]=$r
  done
  FAILED_RANKS=()
  local rc p killed=0
  local -a live=("${pids[@]}")
  while (( ${#live[@]} > 0 )); do
    local -a rest=()
    for p in "${live[@]}"; do
      if kill -0 "$p" 2>/dev/null; then rest+=("$p"); continue; fi
      wait "$p"
      rc=$?
      if (( rc != 0 )); then
        FAILED_RANKS+=("${rank_of[$p]} (exit $rc$( ((rc == 124)) && echo ", timed out after ${RANK_TIMEOUT:-240} s"))")
      fi
    done
    live=("${rest[@]}")
    if (( ${#FAILED_RANKS[@]} > 0 && !killed )); then
      # stop the others now; their exits are collected by this loop and listed too
      for p in "${live[@]}"; do kill -TERM "$p" 2>/dev/null; done
      killed=1
    fi
    (( ${#live[@]} > 0 )) && sleep 0.2
  done
  rm -f "$id_file"
  (( ${#FAILED_RANKS[@]} == 0 ))
}
