#!/bin/bash
# Decoding's levers side by side on one GPU, in one process each and interleaved: fsdpd-edge's
# decoding rate on random models of the seed shape (dim 2048, 12 layers, 16 heads, vocab 32000)
# and the small one (dim 1024, 8 layers, 8 heads), fp16 and int8 weights, through
#   - edge_bench --causal --decode-only (a warm-up round, then seq/2 tokens after a prompt of
#     seq/2; narrow and wide matvec layouts; then a token's matvecs alone, back to back), by
#     default and with each lever off:
#     --submit-every 0 (one submit a token), --no-fuse-into-linear (each norm, SiLU, add and
#     cache copy its own dispatch) and, when LEVERS names it, --separate-combine (attention's
#     slices added by a dispatch of their own); with int8 weights also the wide-words matvec;
#   - fsdpd-edge generate --warmup 1 (tg128 after an 8-token prompt, as edge_vs_llama.sh runs it)
#     with each --matvec of MATVECS (default "auto wide-2 wide-4", and int8 also wide-words; "":
#     no generate).
# From the repository root on the GPU machine, the Vulkan loader set up as edge_bench.sh says:
#   bench/edge_decode_ab.sh EDGE_DIR OUT_DIR [ROUNDS]     (SPECS="NAME:DIM:LAYERS:HEADS ..." for others)
# LEVERS="default" runs edge_bench by default only (the levers' names: default, submit-every-0,
# no-fuse, separate-combine); LEVERS="" runs no edge_bench. PICKS="device host" runs each
# generate also with --pick-on-host (every token's logits read back and picked on the host;
# default "device").
# EDGE_DIR holds fsdpd-edge and edge_bench (libraries in EDGE_DIR/lib). One line a run on stdout;
# the generate lines also in OUT_DIR/generate.txt, and each edge_bench log in OUT_DIR.
set -uo pipefail
edge=${1:?EDGE_DIR}
out=${2:?OUT_DIR}
rounds=${3:-2}
mkdir -p "$out"
export LD_LIBRARY_PATH=$edge/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for spec in ${SPECS:-seed:2048:12:16 small:1024:8:8}; do
  IFS=: read -r name dim layers heads <<<"$spec"
  model=$out/$name.safetensors
  "$edge/edge_bench" --export-only --causal --dim "$dim" --layers "$layers" --heads "$heads" \
    --vocab 32000 --model "$model" >/dev/null || exit 1
  for round in $(seq "$rounds"); do
    for weights in auto int8; do
      for lever_name in ${LEVERS-default submit-every-0 no-fuse}; do
        case $lever_name in
          default) lever="" ;;
          submit-every-0) lever="--submit-every 0" ;;
          no-fuse) lever="--no-fuse-into-linear" ;;
          separate-combine) lever="--separate-combine" ;;
          *) echo "edge_decode_ab.sh: unknown lever $lever_name" >&2; exit 2 ;;
        esac
        log=$out/$name-$weights-${lever// /}-$round.txt
        # shellcheck disable=SC2086  # the lever is words
        timeout 180 "$edge/edge_bench" --causal --decode-only --seq 256 --weights "$weights" \
          --model "$model" --reuse-model $lever >"$log" 2>&1
        sed -n "s|^\[.*, matvec \([a-z0-9, ]*\)\] .*|\1|p; s|^  decoding (batch 1): .*then \([0-9]*\) tokens/s.*|\1|p
                s|^  a token's matvecs back to back: \([0-9.]*\) ms.*|(matvecs alone \1 ms)|p" \
          "$log" | paste -sd' ' | sed "s|^|$name $weights ${lever:-default} round $round: |"
      done
      extra=$([ "$weights" = int8 ] && [ -z "${MATVECS+set}" ] && echo wide-words)
      for matvec in ${MATVECS-auto wide-2 wide-4} $extra; do
        for pick in ${PICKS:-device}; do
          flag=$([ "$pick" = host ] && echo --pick-on-host)
          # shellcheck disable=SC2086  # the flag is a word or none
          timeout 60 "$edge/fsdpd-edge" generate "$model" --prompt-ids "1 2 3 4 5 6 7 8" \
            --new-tokens 128 --seq 512 --warmup 1 --weights "$weights" --matvec "$matvec" $flag \
            2>&1 >/dev/null |
            sed -n "s|^fsdpd-edge: decoding|$name $weights generate (matvec $matvec, pick $pick)|p" |
            sed "s|)|) round $round:|" |
            tee -a "$out/generate.txt"
        done
      done
    done
  done
done
