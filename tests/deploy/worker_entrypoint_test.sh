#!/usr/bin/env bash
# Runs deploy/kubernetes/base/worker-entrypoint.sh with a stand-in fsdpd-worker and checks that
# it starts one worker per device with the pod's flags, stops the others and fails when one
# worker dies, stops every worker and succeeds on SIGTERM, and rejects bad device lists.
#
#   worker_entrypoint_test.sh SOURCE_DIR
set -uo pipefail

source_dir=${1:?usage: worker_entrypoint_test.sh SOURCE_DIR}
entrypoint=$source_dir/deploy/kubernetes/base/worker-entrypoint.sh
work=$(mktemp -d)
entrypoint_pid=
cleanup() {
  [ -n "$entrypoint_pid" ] && kill "$entrypoint_pid" 2>/dev/null
  # Stand-ins left behind by a broken entrypoint.
  local pid_file
  for pid_file in "$work"/*/pid-*; do
    [ -e "$pid_file" ] && kill "$(cat "$pid_file")" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# The stand-in records its arguments, records SIGTERM, and exits with status 3 when the file
# "$FAKE_DIR/exit-<device>" appears.
cat >"$work/fake-worker" <<'FAKE'
#!/usr/bin/env bash
device=
arguments=("$@")
while [ $# -gt 0 ]; do
  if [ "$1" = --device ]; then device=$2; fi
  shift
done
name=${device//:/-}
echo $$ >"$FAKE_DIR/pid-$name"
printf '%s\n' "${arguments[@]}" >"$FAKE_DIR/args-$name"
trap 'echo terminated >"$FAKE_DIR/term-$name"; exit 0' TERM
echo "worker $device running"
while [ ! -e "$FAKE_DIR/exit-$name" ]; do sleep 0.05; done
exit 3
FAKE
chmod +x "$work/fake-worker"

wait_for() {  # wait_for SECONDS COMMAND... → 0 once COMMAND succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.05
  done
}
all_started() {  # all_started DIR DEVICE_NAMES...
  local dir=$1 name
  shift
  for name in "$@"; do [ -e "$dir/args-$name" ] || return 1; done
}
exited() { ! kill -0 "$1" 2>/dev/null; }

start_entrypoint() {  # start_entrypoint DIR DEVICES [ENV...]; sets entrypoint_pid
  local dir=$1 devices=$2
  shift 2
  mkdir -p "$dir"
  env FAKE_DIR="$dir" FSDPD_WORKER_BINARY="$work/fake-worker" FSDPD_WORKER_DEVICES="$devices" \
    FSDPD_CHECKPOINT_ROOT=/checkpoints FSDPD_WORKER_HOSTNAME=node-7 \
    FSDPD_WORKER_ADDRESS=10.1.2.3 "$@" bash "$entrypoint" --log-level debug \
    >"$dir/output" 2>&1 &
  entrypoint_pid=$!
}

# 1. One worker per listed device, each with the pod's flags; one dying stops the rest.
run=$work/die
start_entrypoint "$run" "cuda:0,cuda:1 cuda:2"
if wait_for 10 all_started "$run" cuda-0 cuda-1 cuda-2; then
  expected="--device cuda:1 --checkpoint-root /checkpoints --hostname node-7"
  expected+=" --address 10.1.2.3 --log-level debug"
  [ "$(tr '\n' ' ' <"$run/args-cuda-1")" = "$expected " ] ||
    fail "worker arguments were: $(tr '\n' ' ' <"$run/args-cuda-1")"
  touch "$run/exit-cuda-1"
  if wait_for 10 exited "$entrypoint_pid"; then
    wait "$entrypoint_pid"
    status=$?
    [ $status -eq 3 ] || fail "entrypoint exited with $status after a worker exited with 3"
    { [ -e "$run/term-cuda-0" ] && [ -e "$run/term-cuda-2" ]; } ||
      fail "the other workers were not stopped when cuda:1 died"
    grep -q '^\[cuda:2\] worker cuda:2 running$' "$run/output" ||
      fail "worker output is not tagged with its device: $(cat "$run/output")"
    grep -q 'worker on cuda:1 exited with status 3' "$run/output" ||
      fail "the entrypoint did not say which worker died: $(cat "$run/output")"
  else
    fail "entrypoint kept running after a worker died"
  fi
else
  fail "not every worker started: $(ls "$run")"
fi
entrypoint_pid=

# 2. SIGTERM stops every worker and ends the entrypoint with 0; auto counts the pod's GPUs.
run=$work/term
start_entrypoint "$run" auto NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb
if wait_for 10 all_started "$run" cuda-0 cuda-1; then
  [ -e "$run/args-cuda-2" ] && fail "auto started a worker on a third GPU"
  kill -TERM "$entrypoint_pid"
  if wait_for 10 exited "$entrypoint_pid"; then
    wait "$entrypoint_pid"
    status=$?
    [ $status -eq 0 ] || fail "entrypoint exited with $status on SIGTERM"
    { [ -e "$run/term-cuda-0" ] && [ -e "$run/term-cuda-1" ]; } ||
      fail "SIGTERM did not reach every worker"
  else
    fail "entrypoint ignored SIGTERM"
  fi
else
  fail "auto with two visible GPUs did not start cuda:0 and cuda:1: $(ls "$run")"
fi
entrypoint_pid=

# 3. auto without a GPU list asks nvidia-smi.
run=$work/smi
mkdir -p "$work/bin"
cat >"$work/bin/nvidia-smi" <<'SMI'
#!/bin/sh
echo "GPU 0: NVIDIA H200 (UUID: GPU-1)"
echo "GPU 1: NVIDIA H200 (UUID: GPU-2)"
echo "GPU 2: NVIDIA H200 (UUID: GPU-3)"
SMI
chmod +x "$work/bin/nvidia-smi"
start_entrypoint "$run" auto NVIDIA_VISIBLE_DEVICES=all PATH="$work/bin:$PATH"
wait_for 10 all_started "$run" cuda-0 cuda-1 cuda-2 ||
  fail "auto with nvidia-smi listing three GPUs did not start three workers: $(ls "$run")"
kill -TERM "$entrypoint_pid" 2>/dev/null
wait_for 10 exited "$entrypoint_pid" || fail "entrypoint ignored SIGTERM"
entrypoint_pid=

# 4. Bad device lists are refused with a message naming the problem.
expect_refusal() {  # expect_refusal DEVICES MESSAGE [ENV...]
  local devices=$1 message=$2 output status
  shift 2
  output=$(env FSDPD_WORKER_BINARY="$work/fake-worker" FSDPD_WORKER_DEVICES="$devices" "$@" \
    bash "$entrypoint" 2>&1)
  status=$?
  [ $status -eq 2 ] || fail "FSDPD_WORKER_DEVICES=\"$devices\" exited with $status, not 2"
  [[ "$output" == *"$message"* ]] || fail "FSDPD_WORKER_DEVICES=\"$devices\" said: $output"
}
expect_refusal "cuda:0,gpu1" '"gpu1" is not cpu or cuda:N'
expect_refusal " , " "no device to run a worker on"
expect_refusal auto "nvidia-smi is missing" NVIDIA_VISIBLE_DEVICES=all \
  PATH=/nonexistent:/usr/bin:/bin

if [ $failures -ne 0 ]; then
  echo "worker entrypoint: $failures failure(s)" >&2
  exit 1
fi
echo "worker entrypoint: starts, stops and refuses as expected"
