#!/usr/bin/env bash
# Entry point of the fsdpd worker pod: starts one fsdpd-worker per device of the pod and keeps
# the pod alive only while all of them run, so that Kubernetes restarts the set as one.
#
# One container holding every GPU of the node, rather than one container per GPU: NCCL's
# NVLink / CUDA IPC transport needs each rank's process to see its peers' GPUs, and the device
# plugin gives a GPU to one container only.
#
# Environment:
#   FSDPD_WORKER_DEVICES   "auto" (default): cuda:0..N-1 for the N GPUs the pod was given;
#                          or a list such as "cpu,cpu" or "cuda:0 cuda:1".
#   FSDPD_CHECKPOINT_ROOT  --checkpoint-root for every worker (shared by a job's ranks).
#   FSDPD_ALLOWED_ROOT     --allowed-root: where jobs' data and init files may lie.
#   FSDPD_WORKER_HOSTNAME  --hostname (the node name, so the scheduler packs ranks by node).
#   FSDPD_WORKER_ADDRESS   --address (the pod IP, where peers reach these ranks).
#   FSDPD_WORKER_BINARY    the worker binary (default: fsdpd-worker on PATH).
#   FSDPD_COORDINATOR      read by fsdpd-worker itself.
# Arguments are passed to every worker unchanged.
set -uo pipefail

binary=${FSDPD_WORKER_BINARY:-fsdpd-worker}

count_gpus() {
  local visible=${NVIDIA_VISIBLE_DEVICES:-}
  # The device plugin lists the pod's GPUs by UUID or index; "all" and the volume-mount
  # strategy leave only nvidia-smi to count them.
  if [[ -n "$visible" && "$visible" != all && "$visible" != none && "$visible" != void &&
    "$visible" != /* ]]; then
    local -a listed
    IFS=',' read -r -a listed <<<"$visible"
    echo "${#listed[@]}"
    return 0
  fi
  if ! command -v nvidia-smi >/dev/null; then
    echo "worker-entrypoint: FSDPD_WORKER_DEVICES=auto but nvidia-smi is missing and" \
      "NVIDIA_VISIBLE_DEVICES lists no GPU; set FSDPD_WORKER_DEVICES" >&2
    return 1
  fi
  nvidia-smi -L | grep -c '^GPU '
}

devices=()
if [[ "${FSDPD_WORKER_DEVICES:-auto}" == auto ]]; then
  gpus=$(count_gpus) || exit 2
  for ((index = 0; index < gpus; index++)); do devices+=("cuda:$index"); done
else
  read -r -a devices <<<"${FSDPD_WORKER_DEVICES//,/ }"
fi
if [[ ${#devices[@]} -eq 0 ]]; then
  echo "worker-entrypoint: no device to run a worker on (FSDPD_WORKER_DEVICES=" \
    "\"${FSDPD_WORKER_DEVICES:-auto}\")" >&2
  exit 2
fi
for device in "${devices[@]}"; do
  if [[ ! "$device" =~ ^(cpu|cuda:[0-9]+)$ ]]; then
    echo "worker-entrypoint: FSDPD_WORKER_DEVICES: \"$device\" is not cpu or cuda:N" >&2
    exit 2
  fi
done

common=()
[[ -n "${FSDPD_CHECKPOINT_ROOT:-}" ]] && common+=(--checkpoint-root "$FSDPD_CHECKPOINT_ROOT")
[[ -n "${FSDPD_ALLOWED_ROOT:-}" ]] && common+=(--allowed-root "$FSDPD_ALLOWED_ROOT")
[[ -n "${FSDPD_WORKER_HOSTNAME:-}" ]] && common+=(--hostname "$FSDPD_WORKER_HOSTNAME")
[[ -n "${FSDPD_WORKER_ADDRESS:-}" ]] && common+=(--address "$FSDPD_WORKER_ADDRESS")

declare -A device_of
pids=()
for device in "${devices[@]}"; do
  # The subshell becomes the worker (exec), so its pid is the worker's and signals reach it;
  # its output goes through a filter that tags each line with the device.
  (
    exec > >(sed -u "s/^/[$device] /") 2>&1
    exec "$binary" --device "$device" "${common[@]}" "$@"
  ) &
  pids+=($!)
  device_of[$!]=$device
done
echo "worker-entrypoint: started ${#pids[@]} worker(s): ${devices[*]}"

terminating=0
stop_all() {
  kill -TERM "${pids[@]}" 2>/dev/null
}
# shellcheck disable=SC2317  # called by the trap below
on_signal() {
  terminating=1
  stop_all
}
trap on_signal TERM INT

exited_pid=
wait -n -p exited_pid "${pids[@]}"
first_status=$?
if [[ $terminating -eq 0 ]]; then
  echo "worker-entrypoint: worker on ${device_of[$exited_pid]:-?} exited with status" \
    "$first_status; stopping the others so the pod restarts" >&2
  stop_all
fi
# A signal interrupts wait; keep waiting until every worker is gone.
while :; do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [[ $alive -eq 0 ]] && break
  wait "${pids[@]}" 2>/dev/null
done

if [[ $terminating -eq 1 ]]; then exit 0; fi
# A worker never ends on its own while the pod should run: report it as a failure.
[[ $first_status -eq 0 ]] && first_status=1
exit "$first_status"
