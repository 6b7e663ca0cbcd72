#!/bin/bash
# The seed workload across the GPUs of one host, beside PyTorch FSDP2 at the same sizes:
#   1. for N in 1 and $WORLDS (default: 2 4 8, those the host has): fsdpd and N `fsdpd-worker
#      --device cuda:i`, one per GPU, training examples/seed.yaml at world_size N (batch 8 per
#      rank, as the anchor), watched with `fsdpctl --json watch`; nvidia-smi samples every GPU;
#   2. the anchor under `torchrun --nproc_per_node=N`, eager and compiled;
#   3. with KILL_WORLD (default 4, if the host has that many GPUs): the same job at that size with
#      checkpoints every 10 steps and 120 steps; one worker is killed with SIGKILL at step 40
#      and started again; the job must resume from its checkpoint and end within bf16 bounds of
#      the uninterrupted loss;
#      SHARE_GPU=1 puts every worker on cuda:0 (they then collect through host memory, as
#      N ranks on one GPU do) with a smaller model: the kill test on a single-GPU machine;
#   4. one table per size (bench/summarize_multi.py): tokens/s per GPU, scaling efficiency
#      against N = 1, exposed communication per step, peak memory per GPU, ratios to the anchor.
# Run from the repository root on the GPU machine after bench/bundle_for_device.sh:
#   OUT=/tmp/out bench/gpu_multi.sh              # WORLDS="2 4" STEPS=40 ANCHOR_MODES="compile"
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
[ -x "$bin/fsdpd-worker" ] || { echo "gpu_multi: no binaries in $bin (run bench/bundle_for_device.sh)" >&2; exit 1; }
spec=$repo_root/examples/seed.yaml
steps=${STEPS:-40}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$gpus" -ge 1 ] || { echo "gpu_multi: nvidia-smi lists no GPU" >&2; exit 1; }
worlds="1"
for world in ${WORLDS:-2 4 8}; do
  if [ "$world" -le "$gpus" ]; then worlds="$worlds $world"; else echo "gpu_multi: world $world skipped: $gpus GPU(s)"; fi
done
kill_world=${KILL_WORLD:-4}
share_gpu=${SHARE_GPU:-0}
kill_gpus=$gpus
[ "$share_gpu" = 1 ] && kill_gpus=$kill_world
work=$(mktemp -d /tmp/fsdpd-gpu-multi-XXXXXX)
pids=()

say() { echo "== $(date +%H:%M:%S) $*" | tee -a "$out/gpu_multi.log"; }
stop_started() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_started; [ -n "$sampler" ] && kill "$sampler" 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
# nvidia-smi's memory.used of every GPU (index, MiB) every 100 ms into $1 until
# stop_memory_sampler (bench/device_env.sh).
start_all_gpus_memory_sampler() {
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null &
  sampler=$!
}

# start_cluster TAG WORLD: fsdpd and WORLD workers, one per GPU; sets $listen.
start_cluster() {
  local tag=$1 world=$2
  listen="127.0.0.1:$(free_port)"
  "$bin/fsdpd" --listen "$listen" --metrics-listen "" --state-dir "$work/$tag/state" \
    --heartbeat-timeout 10s >"$out/$tag-fsdpd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "fsdpd listening on" "$out/$tag-fsdpd.log" && break; sleep 0.2; done
  for ((gpu = 0; gpu < world; gpu++)); do start_worker "$tag" "$gpu"; done
  local idle=0
  for _ in $(seq 300); do
    idle=$("$bin/fsdpctl" --coordinator "$listen" --json workers 2>/dev/null | python3 -c \
      'import json,sys; print(sum(w["state"]=="IDLE" for w in json.load(sys.stdin)["workers"]))' 2>/dev/null || echo 0)
    [ "$idle" -ge "$world" ] && return 0
    sleep 0.2
  done
  say "$tag: only $idle of $world workers registered"
  return 1
}
start_worker() {  # start_worker TAG GPU: sets worker_pid
  local device=$2
  [ "$share_gpu" = 1 ] && [[ $1 == kill-* ]] && device=0
  "$bin/fsdpd-worker" --coordinator "$listen" --device "cuda:$device" --checkpoint-root "$work/$1/ckpt" \
    --allowed-root "$repo_root/examples" --hostname "$(hostname)" \
    >>"$out/$1-worker-$2.log" 2>&1 &
  worker_pid=$!
  pids+=("$worker_pid")
  worker_pids[$2]=$worker_pid
}
job_spec() {  # job_spec WORLD STEPS CHECKPOINT_EVERY [MODEL] > spec
  sed -E -e "s/world_size: 1/world_size: $1/" -e "s/steps: 40/steps: $2/" \
    -e "s/^model: .*/model: ${4:-{vocab: 32000, dim: 2048, layers: 12, heads: 16, ffn_mult: 4\}}/" \
    -e "s/checkpoint: \{every_steps: 0, keep: 1\}/checkpoint: {every_steps: $3, keep: 2}/" \
    -e "s/max_restarts: 0/max_restarts: 2/" "$spec"
}
submit() {  # submit SPEC → job id
  "$bin/fsdpctl" --coordinator "$listen" --json submit "$1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

say "device: $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), worlds: $worlds"
summary_args=()
declare -A worker_pids
for world in $worlds; do
  tag=fsdpd-$world
  if start_cluster "$tag" "$world"; then
    job_spec "$world" "$steps" 0 >"$work/$tag.yaml"
    start_all_gpus_memory_sampler "$out/$tag-memory.csv"
    job=$(submit "$work/$tag.yaml")
    say "$tag: job $job"
    timeout -k 5 300 "$bin/fsdpctl" --coordinator "$listen" --json watch "$job" >"$out/$tag-watch.jsonl" 2>"$out/$tag-watch.err"
    say "$tag: $("$bin/fsdpctl" --coordinator "$listen" --json status "$job" | head -c 300)"
    stop_memory_sampler
  fi
  stop_started
  summary_args+=(--fsdpd "$world=$out/$tag-watch.jsonl" --fsdpd-memory "$world=$out/$tag-memory.csv")
  for mode in ${ANCHOR_MODES:-eager compile}; do
    [ -f "$anchor" ] && [ -x "$torchrun_bin" ] || { say "anchor skipped: $anchor or $torchrun_bin missing"; break; }
    compile=0; [ "$mode" = compile ] && compile=1
    start_all_gpus_memory_sampler "$out/anchor-$mode-$world-memory.csv"
    COMPILE=$compile STEPS=$steps WARM=10 timeout -k 5 400 "$torchrun_bin" --standalone \
      --nproc_per_node="$world" "$anchor" >"$out/anchor-$mode-$world.log" 2>&1
    say "anchor $mode at $world: exit $? $(grep RESULT "$out/anchor-$mode-$world.log")"
    stop_memory_sampler
    summary_args+=(--anchor "$mode:$world=$out/anchor-$mode-$world.log"
      --anchor-memory "$mode:$world=$out/anchor-$mode-$world-memory.csv")
  done
done

# 3. A worker killed with SIGKILL mid-job, then started again: resume, and the same loss.
if [ "$kill_world" -le "$kill_gpus" ] && [ "$kill_world" -ge 2 ]; then
  kill_model=""
  [ "$share_gpu" = 1 ] && kill_model="{vocab: 8192, dim: 512, layers: 4, heads: 8, ffn_mult: 4}"
  for run in straight killed; do
    tag=kill-$run
    start_cluster "$tag" "$kill_world" || { stop_started; continue; }
    job_spec "$kill_world" 120 10 "$kill_model" >"$work/$tag.yaml"
    job=$(submit "$work/$tag.yaml")
    if [ "$run" = killed ]; then
      for _ in $(seq 600); do
        step=$("$bin/fsdpctl" --coordinator "$listen" --json status "$job" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("step",0))')
        [ "$step" -ge 40 ] && break
        sleep 0.2
      done
      victim=$((kill_world - 1))
      say "$tag: step $step, kill -9 the worker on cuda:$victim"
      kill -9 "${worker_pids[$victim]}"
      sleep 2
      start_worker "$tag" "$victim"
    fi
    timeout -k 5 400 "$bin/fsdpctl" --coordinator "$listen" --json watch "$job" >"$out/$tag-watch.jsonl" 2>"$out/$tag-watch.err"
    "$bin/fsdpctl" --coordinator "$listen" --json status "$job" >"$out/$tag-status.json"
    say "$tag: $(head -c 400 "$out/$tag-status.json")"
    stop_started
  done
  summary_args+=(--kill-straight "$out/kill-straight-status.json" --kill-killed "$out/kill-killed-status.json")
fi

python3 "$repo_root/bench/summarize_multi.py" "${summary_args[@]}" --json "$out/multi.json" |
  tee "$out/multi.txt"
