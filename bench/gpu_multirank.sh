#!/bin/bash
# N CUDA ranks of one job on a single GPU through the real daemon: fsdpd, N `fsdpd-worker
# --device cuda:0` processes, and `fsdpctl submit` of a small bf16 job at world size N. The
# ranks share the GPU, so they collect through host memory and Gloo
# (worker/comm/host_staged_communicator.h); then the same job on N CPU workers. Prints each
# run's final loss and tokens/s, and the exported models' agreement.
#   OUT=/tmp/out WORLDS="2 4" bench/gpu_multirank.sh        # on the GPU machine, after the bundle
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
worlds=${WORLDS:-2 4}
steps=${STEPS:-60}
work=$(mktemp -d /tmp/fsdpd-multirank-XXXXXX)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# run_job KIND WORLD: one coordinator, WORLD workers of KIND (cpu or cuda:0), one job.
run_job() {
  local kind=$1 world=$2 tag="$1-$2"
  tag=${tag//:/}
  local listen="127.0.0.1:$(free_port)" dir="$work/$tag" device=cpu param=fp32
  [ "$kind" != cpu ] && device=cuda && param=bf16
  mkdir -p "$dir"
  "$bin/fsdpd" --listen "$listen" --metrics-listen "127.0.0.1:$(free_port)" \
    --state-dir "$dir/state" >"$out/$tag-fsdpd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "fsdpd listening on" "$out/$tag-fsdpd.log" && break; sleep 0.2; done
  for rank in $(seq "$world"); do
    "$bin/fsdpd-worker" --coordinator "$listen" --device "$kind" --checkpoint-root "$dir/ckpt" \
      --allowed-root "$dir" --allowed-root "$repo_root/examples" --hostname "$tag-$rank" \
      >"$out/$tag-worker-$rank.log" 2>&1 &
    pids+=($!)
  done
  cat >"$dir/job.yaml" <<SPEC
name: multirank-$tag
model: {vocab: 256, dim: 256, layers: 4, heads: 4, ffn_mult: 4}
data: {source: text, path: $repo_root/examples/tiny_corpus.txt, seq_len: 128}
train: {batch_size: 4, steps: $steps, lr: 1.0e-3, seed: 7}
parallel: {world_size: $world, device: $device, param_dtype: $param}
checkpoint: {every_steps: 20, keep: 2}
profile: {steps: 0}
max_restarts: 0
SPEC
  local job
  job=$("$bin/fsdpctl" --coordinator "$listen" --json submit "$dir/job.yaml" 2>"$out/$tag-submit.err" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  timeout -k 5 240 "$bin/fsdpctl" --coordinator "$listen" --json watch "$job" >"$out/$tag-watch.jsonl" \
    2>"$out/$tag-watch.err"
  "$bin/fsdpctl" --coordinator "$listen" --json status "$job" >"$out/$tag-status.json" 2>&1
  "$bin/fsdpctl" --coordinator "$listen" export "$job" -o "$out/$tag.safetensors" >/dev/null 2>&1
  python3 - "$out/$tag-status.json" "$out/$tag-watch.jsonl" "$tag" <<'PY'
import json, statistics, sys
status = json.load(open(sys.argv[1]))
rates = []
for line in open(sys.argv[2]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    if event.get("tokens_per_second"):
        rates.append(event["tokens_per_second"])
median = statistics.median(rates[len(rates) // 4:]) if rates else 0
print(f"{sys.argv[3]}: state {status.get('state')}, step {status.get('step')}, "
      f"loss {status.get('loss')}, median tokens/s {median:.0f}, reason {status.get('reason', '')!r}")
PY
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  pids=()
}

for world in $worlds; do
  run_job cuda:0 "$world"
  run_job cpu "$world"
  python3 - "$out/cuda0-$world.safetensors" "$out/cpu-$world.safetensors" "$world" <<'PY'
import sys
try:
    from safetensors.numpy import load_file
except ImportError:
    print("safetensors not importable: exported models not compared"); sys.exit(0)
import numpy as np
try:
    gpu, cpu = load_file(sys.argv[1]), load_file(sys.argv[2])
except Exception as error:
    print(f"world {sys.argv[3]}: cannot compare exports: {error}"); sys.exit(0)
worst = max(float(np.linalg.norm(gpu[k].astype(np.float64) - cpu[k]) / max(np.linalg.norm(cpu[k]), 1e-30))
            for k in cpu)
print(f"world {sys.argv[3]}: exported tensors {len(gpu)} vs {len(cpu)}, same names "
      f"{sorted(gpu) == sorted(cpu)}, worst relative distance cuda vs cpu {worst:.4f}")
PY
done
