#!/bin/bash
# Prompt processing with int8 weights, each int8 matmul by name, on one GPU: random models of the
# seed shape (dim 2048, 12 layers, 16 heads, vocab 32000) and the small one (dim 1024, 8 layers,
# 8 heads), causal, through
#   - fsdpd-edge eval --batch 1 --seq 512 over 6 windows (the first untimed), fp16 weights and
#     --weights int8, as bench/llama_cpp/edge_vs_llama.sh measures pp512;
#   - edge_bench --weights int8 --int8-block NAME --batch 1 --seq 512 for each NAME of BLOCKS
#     (names separated by "|"; unset: the subgroup-scope int8 blocks that read fp16 x and the
#     workgroup-scope staged ones; empty: none): the matmul against the CPU reference first
#     (worst error over the fp16 bound), then the forward's tokens/s and each FFN product's
#     TFLOP/s with that block alone.
# From the repository root on the GPU machine, the Vulkan loader set up as edge_bench.sh says:
#   bench/edge_prefill_ab.sh EDGE_DIR OUT_DIR      (SPECS="NAME:DIM:LAYERS:HEADS ..." for others)
# EDGE_DIR holds fsdpd-edge and edge_bench (libraries in EDGE_DIR/lib). A summary line a run on
# stdout; each log in OUT_DIR.
set -uo pipefail
edge=${1:?EDGE_DIR}
out=${2:?OUT_DIR}
mkdir -p "$out"
export LD_LIBRARY_PATH=$edge/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
blocks=${BLOCKS-int8 128x128k32h|int8 256x128k32h|int8 128x256k32cm2h-s|int8 256x128k32cm2h-s|int8 128x128k64cm2h-s}
for spec in ${SPECS:-seed:2048:12:16 small:1024:8:8}; do
  IFS=: read -r name dim layers heads <<<"$spec"
  model=$out/$name.safetensors
  "$edge/edge_bench" --export-only --causal --dim "$dim" --layers "$layers" --heads "$heads" \
    --vocab 32000 --model "$model" >/dev/null || exit 1
  python3 - "$out/tokens.u32" 32000 $((6 * 512 + 1)) <<'PY'
import sys, numpy as np
path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
np.random.default_rng(1).integers(0, vocab, count, dtype=np.uint32).tofile(path)
PY
  for weights in auto int8; do
    log=$out/$name-$weights-eval.txt
    timeout 120 "$edge/fsdpd-edge" eval "$model" --tokens "$out/tokens.u32" --token-bytes 4 \
      --batch 1 --seq 512 --weights "$weights" >"$log" 2>&1
    sed -n 's/^forward \([0-9.]*\) tokens\/s.*/\1 tokens\/s/p' "$log" |
      sed "s|^|$name $weights eval (pp512): |"
  done
  IFS='|' read -r -a names <<<"$blocks"
  for block in "${names[@]}"; do
    log=$out/$name-${block// /_}.txt
    timeout 150 "$edge/edge_bench" --causal --weights int8 --int8-block "$block" --batch 1 \
      --seq 512 --model "$model" --reuse-model >"$log" 2>&1
    rc=$?
    echo "$name $block (exit $rc): $(sed -n 's/.*vs the CPU reference.*worst error \([0-9.]*\) of.*/check \1 of the bound;/p
        s/^  forward: \([0-9]*\) tokens\/s.*/forward \1 tokens\/s;/p
        s/^  matmul \([0-9x]*\) (x as the forward holds it): \([0-9.]*\) TFLOP.*/\1 \2 TFLOP\/s/p' \
      "$log" | paste -sd' ')"
  done
done
