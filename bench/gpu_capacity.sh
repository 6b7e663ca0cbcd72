#!/bin/bash
# Capacity on one GPU: the largest MiniLLM of one width (DIM, default 4096; SEQ 1024, BATCH 8,
# 16 heads) that trains, as a number of layers N, for each runner in RUNNERS:
#   fsdpd    fsdpd-train with examples/seed.yaml's recipe and activation_recompute RECOMPUTE
#            (block): no gradient clipping, so AdamW runs in backward;
#   anchor   the PyTorch FSDP2 anchor (bench/anchor/seed_train_fsdp.py), eager;
#   offload  the same with FSDP2's CPUOffloadPolicy (OFFLOAD=1).
# A trial trains STEPS steps (3) at N layers and counts if every step reports a finite loss:
# fsdpd-train is stopped after its last step instead of waiting for its export, and the anchor
# (EXIT_AFTER_RESULT=1) exits after its RESULT line instead of tearing down. An out-of-memory
# error or a killed process is a failure; a trial stopped by the time limit is undecided
# (bench/capacity_table.py). The search starts from a guess made from the card's memory (the
# estimate below), steps one layer away from it, then two, four... until it brackets the
# boundary, then bisects: the result is the N that trained with N + 1 failed, both run in this
# call. Every trial is a line of $OUT/capacity/trials.tsv:
#   runner layers params ok tokens_per_s driver_peak_mib host_peak_gb seconds why
# and bench/capacity_table.py turns it into the table of bench/RESULTS.md.
#   OUT=/tmp/out bench/gpu_capacity.sh     # after bench/bundle_for_device.sh
# Knobs: RUNNERS ("fsdpd anchor offload"), DIM, SEQ, BATCH, STEPS, RECOMPUTE, MAX_TRIALS (6 a
# runner), TRIAL_SECONDS (150; OFFLOAD_TRIAL_SECONDS 240: an offloaded trial of 7B parameters
# took 176 s on an H100 host), BUDGET_SECONDS (560), GUESS_<runner> to start elsewhere.
# Through the device tool only a few files of $OUT come back: pack $OUT/capacity in one archive.
set -uo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}/capacity
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
dim=${DIM:-4096}
seq_len=${SEQ:-1024}
batch=${BATCH:-8}
steps=${STEPS:-3}
recompute=${RECOMPUTE:-block}
max_trials=${MAX_TRIALS:-6}
budget_seconds=${BUDGET_SECONDS:-560}
started=$(date +%s)
work=$(mktemp -d /tmp/fsdpd-gpu-capacity-XXXXXX)
trap 'stop_memory_sampler; rm -rf "$work"' EXIT
left() { echo $((budget_seconds - ($(date +%s) - started))); }
say() { echo "== $(date +%H:%M:%S) $*" | tee -a "$out/gpu_capacity.log"; }
trials=$out/trials.tsv
[ -f "$trials" ] || printf 'runner\tlayers\tparams\tok\ttokens_per_s\tdriver_peak_mib\thost_peak_gb\tseconds\twhy\n' >"$trials"

total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -n 1)
host_gb=$(awk '/MemTotal/ {printf "%d", $2 / 1e6}' /proc/meminfo)
say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0); host ${host_gb} GB"
say "shape: dim $dim, seq $seq_len, batch $batch, 16 heads, $steps steps a trial; fsdpd recompute $recompute"

# MiniLLM's parameters at L layers (proto/spec/job_spec_estimates.cc's count, the anchor's too).
params_of() { echo $(($1 * (12 * dim * dim + 7 * dim) + 2 * 32000 * dim)); }

# First guesses, from bytes a layer: fsdpd keeps 12 bytes a parameter (master and AdamW's m and
# v; gradients only for the units in flight) plus a block's bf16 input; FSDP2 16 (fp32 params,
# grads, m and v) plus its activations, ~24 bf16 [tokens, dim] tensors a block in eager mode;
# with offload the host holds the 16 bytes (and pinned copies: 0.65 of the host is counted) and
# the GPU the activations. 9 GB are set aside for the embedding, the head, the logits and the
# context (call C1: 29 layers of fsdpd used 8.3 GB beyond their layers on an H100). Only the
# starting point: the trials decide.
guess() {
  python3 - "$1" "$dim" "$seq_len" "$batch" "$total_mib" "$host_gb" <<'EOF'
import sys
runner, d, s, b, total_mib, host_gb = sys.argv[1], *map(int, sys.argv[2:])
layer = 12 * d * d + 7 * d
act = b * s * d * 2
gpu = total_mib * 2**20 - 9e9
per_layer = {"fsdpd": 12 * layer + act, "anchor": 16 * layer + 24 * act}
if runner == "offload":
    print(max(1, int(min(0.65 * host_gb * 1e9 / (16 * layer), gpu / (24 * act)))))
else:
    print(max(1, int(gpu / per_layer[runner])))
EOF
}

# One trial: writes its line to $trials and returns 0 if it trained.
trial() {
  local runner=$1 layers=$2 limit log samples t0 ok=0 why="" tps="" host=""
  local cap=${TRIAL_SECONDS:-150}
  [ "$runner" = offload ] && cap=${OFFLOAD_TRIAL_SECONDS:-240}
  limit=$(($(left) < cap ? $(left) : cap))
  log=$out/${runner}_L${layers}.log
  samples=$out/${runner}_L${layers}_memory.csv
  say "$runner: $layers layers, $(params_of "$layers") parameters (limit $limit s)"
  t0=$(date +%s)
  start_memory_sampler "$samples"
  if [ "$runner" = fsdpd ]; then
    sed -E -e "s/^model: .*/model: {vocab: 32000, dim: $dim, layers: $layers, heads: 16, ffn_mult: 4}/" \
      -e "s/^data: .*/data: {source: synthetic, seq_len: $seq_len}/" \
      -e "s/batch_size: [0-9]+/batch_size: $batch/" \
      -e "s/activation_recompute: [a-z]+/activation_recompute: $recompute/" \
      examples/seed.yaml >"$work/spec.yaml"
    # Once the last step has reported, the run is stopped: what follows is the export of the
    # final model, which takes a minute for 6B parameters and says nothing about capacity.
    "$bin/fsdpd-train" --spec "$work/spec.yaml" --device cuda:0 --steps "$steps" \
      --checkpoint-dir "$work/ckpt" >"$log.jsonl" 2>"$log" &
    local pid=$! code="" deadline=$((SECONDS + limit))
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$(grep -c '"step":' "$log.jsonl")" -ge "$steps" ]; then
        kill -9 "$pid" 2>/dev/null  # SIGTERM would only cancel the run at a step boundary
        code=0
        break
      fi
      if [ "$SECONDS" -ge "$deadline" ]; then
        kill -9 "$pid" 2>/dev/null
        code=124
        break
      fi
      sleep 1
    done
    wait "$pid"
    local exited=$?
    code=${code:-$exited}
    rm -rf "$work/ckpt"
    read -r ok tps why < <(python3 - "$log.jsonl" "$steps" "$code" <<'EOF'
import json, math, statistics, sys
path, steps, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [json.loads(l) for l in open(path) if l.startswith("{") and '"step"' in l]
rates = [l["tokens_per_second"] for l in lines if l["step"] >= 2]
finite = all(math.isfinite(l["loss"]) for l in lines)
ok = code == 0 and len(lines) == steps and finite
why = "-" if ok else (f"exit_{code}_after_{len(lines)}_steps" + ("" if finite else "_nonfinite")
                     + ("_time_limit" if code == 124 else ""))
print(int(ok), f"{statistics.median(rates):.0f}" if rates else "-", why)
EOF
    )
  else
    OFFLOAD=$([ "$runner" = offload ] && echo 1 || echo 0) DIM=$dim LAYERS=$layers SEQ=$seq_len \
      BATCH=$batch STEPS=$steps WARM=1 COMPILE=0 EXIT_AFTER_RESULT=1 timeout -k 5 "$limit" \
      "$torchrun_bin" --standalone --nproc_per_node=1 "$anchor" >"$log" 2>&1
    local code=$?
    local result
    result=$(grep RESULT "$log")
    # As for fsdpd, the steps decide: a RESULT line means every step ran (call C4's 7.5B
    # offloaded trial printed it, then spent the rest of its limit tearing down).
    if [ -n "$result" ] && ! grep -q "Loss: nan\|Loss: inf" "$log"; then
      ok=1
      why="-"
      tps=$(sed -E 's/.*tokens_per_s=([0-9]+).*/\1/' <<<"$result")
      host=$(sed -E 's/.*host_peak_gb=([0-9.]+).*/\1/' <<<"$result")
    else
      why="exit_$code"
      grep -q "OutOfMemoryError\|out of memory" "$log" && why="${why}_cuda_oom"
      [ "$code" = 137 ] && why="${why}_killed"
      # timeout's TERM at the limit exits 124, its KILL five seconds later 137: either way the
      # trial says nothing about memory (bench/capacity_table.py lists it as undecided).
      { [ "$code" = 124 ] || [ $(($(date +%s) - t0)) -ge "$limit" ]; } && why="${why}_time_limit"
      tps="-"
    fi
  fi
  stop_memory_sampler
  local peak
  peak=$(awk -F', *' 'BEGIN {m = 0} $1 + 0 > m {m = $1 + 0} END {print m}' "$samples" 2>/dev/null)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$runner" "$layers" "$(params_of "$layers")" "$ok" \
    "${tps:--}" "${peak:--}" "${host:--}" "$(($(date +%s) - t0))" "$why" >>"$trials"
  say "$runner L$layers: ok=$ok tokens/s=${tps:--} driver peak ${peak:--} MiB ($why)"
  # fsdpd's start, as its log divides it (engine, weights drawn, weights loaded).
  if [ "$runner" = fsdpd ]; then
    local parts="engine built in [0-9.]+ s|drawn from seed [0-9]+ in [0-9.]+ s"
    parts+="|loaded into the shards in [0-9.]+ s"
    grep -oE "$parts" "$log" | paste -sd';' | sed 's/^/   start: /' | tee -a "$out/gpu_capacity.log"
  fi
  [ "$ok" = 1 ]
}

# The boundary for one runner: the largest N that trained with N + 1 failed, both tried here.
# Each runner gets an equal share of the time left ($2 runners still to search, this one
# included), so that a slow runner cannot starve the ones after it. The first step away from the
# guess is one layer, then two, four...
search() {
  local runner=$1 n lo=0 hi=0 step=1 count=0 var share until
  share=$(($(left) / $2))
  until=$(($(date +%s) + share))
  var=GUESS_$runner
  n=${!var:-$(guess "$runner")}
  say "$runner: first guess $n layers, $share s of the budget"
  while [ "$count" -lt "$max_trials" ] && [ $((until - $(date +%s))) -gt 40 ] && [ "$(left)" -gt 40 ]; do
    count=$((count + 1))
    if trial "$runner" "$n"; then lo=$n; else hi=$n; fi
    if [ "$hi" -gt 0 ] && [ "$hi" -eq $((lo + 1)) ]; then break; fi
    if [ "$hi" -eq 0 ]; then
      n=$((lo + step))
    elif [ "$lo" -eq 0 ]; then
      n=$((hi - step > 1 ? hi - step : 1))
      [ "$n" -eq "$hi" ] && break
    else
      n=$(((lo + hi) / 2))
    fi
    step=$((step * 2))
  done
  say "$runner: largest that trained $lo layers, first that did not (out of memory or time) ${hi:-none} ($count trials)"
}

runners=(${RUNNERS:-fsdpd anchor offload})
for i in "${!runners[@]}"; do
  search "${runners[$i]}" $((${#runners[@]} - i))
done
python3 bench/capacity_table.py "$trials" | tee "$out/table.md"
say "total $(($(date +%s) - started)) s"
