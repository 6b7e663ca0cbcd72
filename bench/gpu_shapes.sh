#!/bin/bash
# fsdpd beside the PyTorch anchor on shapes other than the seed's, on one GPU: for each shape,
# examples/seed.yaml with the shape's model and data fields through `fsdpd-train`, then the anchor
# (bench/anchor/seed_train_fsdp.py) with the same DIM, LAYERS, BATCH and SEQ, and one table per
# shape from bench/summarize_watch.py (medians over steps FIRST..STEPS, driver memory from
# nvidia-smi). The anchor's blocks have 16 heads and no mask, so every shape here has 16 heads
# (head_dim = dim / 16); a causal shape is compared with the anchor's unmasked attention, which
# does about twice its attention work: SHAPES lists the same shape unmasked beside it.
#
# SHAPES: "name dim layers seq batch causal" entries, separated by ';'.
# ANCHOR_MODES: anchor modes (eager, compile); default compile, the issue's yardstick.
#   OUT=/tmp/out bench/gpu_shapes.sh      # after bench/bundle_for_device.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}/shapes
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
[ -x "$bin/fsdpd-train" ] || { echo "gpu_shapes: no fsdpd-train in $bin (run bench/bundle_for_device.sh)" >&2; exit 1; }
steps=${STEPS:-25}
first=${FIRST:-11}
shapes=${SHAPES:-"w1024-l4-s4096-causal 1024 4 4096 4 true;w1024-l4-s4096 1024 4 4096 4 false;w4096-l8-s512 4096 8 512 8 false;w1024-l32-s2048 1024 32 2048 8 false"}
budget_seconds=${BUDGET_SECONDS:-280}
started=$(date +%s)
work=$(mktemp -d /tmp/fsdpd-gpu-shapes-XXXXXX)
trap 'rm -rf "$work"' EXIT

left() { echo $((budget_seconds - ($(date +%s) - started))); }
say() { echo "== $(date +%H:%M:%S) $*" | tee -a "$out/gpu_shapes.log"; }

# Each shape's fsdpd run first, then its anchors; a shape the budget cannot finish is skipped.
declare -A anchor_done
IFS=';' read -ra entries <<<"$shapes"
for entry in "${entries[@]}"; do
  read -r name dim layers seq batch causal <<<"$entry"
  [ -n "$name" ] || continue
  if [ "$(left)" -lt 30 ]; then say "$name skipped: budget spent"; continue; fi
  spec=$work/$name.yaml
  sed -E -e "s/^model: .*/model: {vocab: 32000, dim: $dim, layers: $layers, heads: 16, ffn_mult: 4, causal: $causal}/" \
    -e "s/^data: .*/data: {source: synthetic, seq_len: $seq}/" \
    -e "s/batch_size: [0-9]+/batch_size: $batch/" -e "s/steps: 40/steps: $steps/" \
    examples/seed.yaml >"$spec"
  limit=$(($(left) < 120 ? $(left) : 120))
  say "fsdpd-train $name (dim $dim, layers $layers, seq $seq, batch $batch, head_dim $((dim / 16)), causal $causal; limit $limit s)"
  start_memory_sampler "$out/${name}_fsdpd_memory.csv"
  timeout -k 5 "$limit" "$bin/fsdpd-train" --spec "$spec" --device cuda:0 \
    --checkpoint-dir "$work/ckpt-$name" >"$out/${name}_fsdpd.jsonl" 2>"$out/${name}_fsdpd.log"
  say "fsdpd-train $name exit $?"
  stop_memory_sampler
  anchor_args=()
  key="$dim-$layers-$seq-$batch"
  for mode in ${ANCHOR_MODES:-compile}; do
    log=$out/anchor_${key}_$mode.log
    if [ -z "${anchor_done[$key-$mode]:-}" ]; then
      if [ "$(left)" -lt 30 ]; then say "anchor $mode for $name skipped: budget spent"; continue; fi
      limit=$(($(left) < 150 ? $(left) : 150))
      say "anchor $mode DIM=$dim LAYERS=$layers SEQ=$seq BATCH=$batch (limit $limit s)"
      start_memory_sampler "$out/anchor_${key}_${mode}_memory.csv"
      DIM=$dim LAYERS=$layers SEQ=$seq BATCH=$batch STEPS=$steps WARM=$((first - 1)) \
        COMPILE=$([ "$mode" = compile ] && echo 1 || echo 0) timeout -k 5 "$limit" "$torchrun_bin" \
        --standalone --nproc_per_node=1 "$anchor" >"$log" 2>&1
      say "anchor $mode exit $?: $(grep RESULT "$log")"
      stop_memory_sampler
      anchor_done[$key-$mode]=1
    fi
    anchor_args+=(--anchor "anchor-$mode=$log"
      --anchor-driver-samples "anchor-$mode=$out/anchor_${key}_${mode}_memory.csv")
  done
  python3 bench/summarize_watch.py --watch "$out/${name}_fsdpd.jsonl" --first "$first" \
    --last "$steps" --driver-samples "$out/${name}_fsdpd_memory.csv" "${anchor_args[@]}" \
    --json "$out/$name.json" >"$out/$name.txt" 2>&1
  { echo "-- $name"; cat "$out/$name.txt"; } | tee -a "$out/gpu_shapes.log"
done
say "total $(($(date +%s) - started)) s"
