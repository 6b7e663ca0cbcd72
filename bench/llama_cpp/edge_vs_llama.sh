#!/bin/bash
# fsdpd-edge against llama.cpp on the same model shapes: prompt processing of 512 tokens and
# decoding of 128, tokens/s, one table at the end.
#
# For each shape (default: the seed model, dim 2048, 12 layers, 16 heads, vocab 32000; and dim
# 1024, 8 layers, 8 heads, vocab 32000; ffn ×4, causal, no final norm) it writes a random-weight
# export (edge_bench --export-only), converts it to GGUF (bench/llama_cpp/export_to_gguf.py:
# llama.cpp's gpt2, fp16 matrices), quantizes that to Q8_0 (llama-quantize) and runs
#   - llama.cpp: llama-bench -p 512 -n 128 -ngl 99 -r REPS -fa 0,1 on the fp16 and the Q8_0
#     file, with the Vulkan build and, when given, the CUDA build (bench/llama_cpp/build_cuda.sh);
#   - fsdpd-edge (Vulkan, fp16 and --weights int8): `eval` over PP_WINDOWS windows of one
#     sequence of 512 tokens (batch 1 × seq 512; the first window, which picks the matmul
#     blocks, untimed; 41 by default: at 5, as before, the seed's timed part lasted 0.07 s and its
#     rate swung between calls by a third, bench/RESULTS.md, call E11) for pp512, and
#     `generate --new-tokens 128` after an 8-token prompt (qkv cache, greedy) for tg128.
#
# What the figures measure differs in ways the table's notes repeat: llama-bench's pp512 runs the
# head on the last position only, fsdpd-edge's eval on all 512 (it computes every position's NLL);
# fsdpd-edge's tg is generate's decoding rate, tokens 2 to 128 after the prompt's prefill and the
# first token (positions 9 to 135), llama-bench's tg128 the mean of REPS runs after a warm-up
# (positions 0 to 127). The gpt2
# model differs from fsdpd's in norm (LayerNorm), activation (GELU), a zero position table and
# zero FFN biases (export_to_gguf.py's header); the shapes and FLOPs are the same.
#
#   bench/llama_cpp/edge_vs_llama.sh --vulkan DIR --edge DIR [--cuda DIR] [--work DIR]
#       [--shape NAME:DIM:LAYERS:HEADS:VOCAB]... [--reps 5] [--pp 512] [--tg 128]
#       [--pp-windows 41]
#       [--wheels DIR] [--vk-device N] [--edge-device N] [--skip-q8]
#
# DIRs: --vulkan holds llama-bench and llama-quantize built with GGML_VULKAN (strip and the
# libraries it needs beside it; LD_LIBRARY_PATH gets DIR and DIR/lib), --cuda the same built
# with GGML_CUDA, --edge fsdpd-edge and edge_bench (a build tree, or a folder of both with their
# libraries in DIR/lib as bench/edge_bench.sh bundles them). --shape
# replaces the default shapes (repeat it for several). --wheels: a folder of wheels (gguf,
# pyyaml) unpacked into WORK/pylib when python3 lacks gguf. --vk-device sets
# GGML_VK_VISIBLE_DEVICES for llama.cpp (needed for a CPU device such as lavapipe, which
# llama.cpp skips by default); --edge-device is fsdpd-edge's --device.
#
# On the GPU machine, begin as bench/edge_bench.sh says (the Vulkan loader from .gl,
# VK_DRIVER_FILES), then e.g.
#   bench/llama_cpp/edge_vs_llama.sh --vulkan .device/llama/vulkan --cuda BUILD/bin \
#     --edge .device/edge --wheels .device/llama/whl --work /tmp/evl
# Here, on lavapipe (tiny shapes):
#   VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json bench/llama_cpp/edge_vs_llama.sh \
#     --vulkan VK_BIN --edge build --vk-device 0 --shape tiny:256:4:4:256 --pp 64 --tg 16 --reps 2
set -euo pipefail
die() { echo "edge_vs_llama.sh: $*" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
vulkan="" cuda="" edge="" work=/tmp/edge_vs_llama wheels="" vk_device="" edge_device=0
reps=5 pp=512 tg=128 skip_q8=0 pp_windows=41
shapes=()
while [ $# -gt 0 ]; do
  case $1 in
    --vulkan) vulkan=$2; shift 2 ;;
    --cuda) cuda=$2; shift 2 ;;
    --edge) edge=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --shape) shapes+=("$2"); shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --tg) tg=$2; shift 2 ;;
    --pp-windows) pp_windows=$2; shift 2 ;;
    --wheels) wheels=$2; shift 2 ;;
    --vk-device) vk_device=$2; shift 2 ;;
    --edge-device) edge_device=$2; shift 2 ;;
    --skip-q8) skip_q8=1; shift ;;
    *) echo "edge_vs_llama.sh: unknown argument $1 (the header says the usage)" >&2; exit 2 ;;
  esac
done
[ -n "$vulkan" ] || [ -n "$cuda" ] || die "need --vulkan or --cuda"
[ -n "$edge" ] || die "need --edge DIR (fsdpd-edge, edge_bench)"
[[ "$pp_windows" =~ ^[0-9]+$ ]] && [ "$pp_windows" -ge 2 ] ||
  die "--pp-windows takes 2 or more (the first is untimed); got '$pp_windows'"
[ ${#shapes[@]} -gt 0 ] || shapes=(seed:2048:12:16:32000 small:1024:8:8:32000)

find_bin() {  # DIR NAME: DIR/NAME, DIR/bin/NAME, DIR/edge/NAME or DIR/bench/NAME
  for candidate in "$1/$2" "$1/bin/$2" "$1/edge/$2" "$1/bench/$2"; do
    if [ -x "$candidate" ]; then echo "$candidate"; return; fi
  done
  die "no $2 in $1"
}
edge_bin=$(find_bin "$edge" fsdpd-edge)
edge_bench=$(find_bin "$edge" edge_bench)
# fsdpd-edge's libraries where bundled beside it (bench/edge_bench.sh: DIR/lib).
edge_env=(env LD_LIBRARY_PATH="$(dirname "$edge_bin")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
quantize=$(find_bin "${vulkan:-$cuda}" llama-quantize)
mkdir -p "$work/logs"
logs=$work/logs
results=$work/results.tsv
: >"$results"

# gguf for the converter: python3's own, else the wheels unpacked (wheels are zip files; no pip
# or network needed).
if ! python3 -c 'import gguf' 2>/dev/null; then
  [ -n "$wheels" ] || die "python3 has no gguf; pass --wheels DIR"
  python3 - "$work/pylib" "$wheels"/*.whl <<'PY'
import sys, zipfile
for wheel in sys.argv[2:]:
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
PY
  export PYTHONPATH=$work/pylib${PYTHONPATH:+:$PYTHONPATH}
  python3 -c 'import gguf' || die "gguf from $wheels does not import"
fi

# run_llama ENGINE DIR SHAPE MODEL...: llama-bench on the models, fa off and on; one result line
# per (model, fa, test).
run_llama() {
  local engine=$1 dir=$2 shape=$3
  shift 3
  local models bench json
  models=$(IFS=,; echo "$*")
  bench=$(find_bin "$dir" llama-bench)
  json=$logs/$shape-$engine.json
  echo "== $shape: llama.cpp $engine: llama-bench -m $models -p $pp -n $tg -ngl 99 -r $reps -fa 0,1"
  if ! env LD_LIBRARY_PATH="$dir:$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      ${vk_device:+GGML_VK_VISIBLE_DEVICES=$vk_device} \
      "$bench" -m "$models" -p "$pp" -n "$tg" -ngl 99 -r "$reps" -fa 0,1 -o json \
      >"$json" 2>"$logs/$shape-$engine.log"; then
    echo "   llama-bench failed: see $logs/$shape-$engine.log"; tail -5 "$logs/$shape-$engine.log"
    printf '%s\tllama.cpp %s\tfailed\t-\t-\t-\n' "$shape" "$engine" >>"$results"
    return
  fi
  python3 - "$json" "$shape" "$engine" "$pp" "$tg" >>"$results" <<'PY'
import json, os, sys
path, shape, engine, pp, tg = sys.argv[1:]
rows = {}
for r in json.load(open(path)):
    weights = "Q8_0" if "q8_0" in os.path.basename(r["model_filename"]).lower() else "F16"
    key = (weights, str(r["flash_attn"]).lower() in ("1", "true", "on", "enabled"))
    test = "pp" if int(r["n_prompt"]) > 0 else "tg"
    rows.setdefault(key, {})[test] = f'{float(r["avg_ts"]):.1f} ± {float(r["stddev_ts"]):.1f}'
    gpu = r.get("gpu_info", "")
for (weights, fa), tests in sorted(rows.items()):
    print(f"{shape}\tllama.cpp {engine} (gpt2)\t{weights}, fa {'on' if fa else 'off'}\t"
          f"{tests.get('pp', '-')}\t{tests.get('tg', '-')}\t{gpu or '-'}")
PY
  grep -E "ggml_vulkan: [0-9]+ =|Device [0-9]+:" "$logs/$shape-$engine.log" | head -2 || true
}

# The devices, for the record: fsdpd-edge's view (cooperative matrices, heaps) and the GPU's.
"${edge_env[@]}" "$edge_bin" devices >"$logs/devices.log" 2>&1 || true
nvidia-smi -L >>"$logs/devices.log" 2>&1 || true
grep -E "^device|^GPU" "$logs/devices.log" || true

for spec in "${shapes[@]}"; do
  IFS=: read -r name dim layers heads vocab <<<"$spec"
  model=$work/$name.safetensors
  echo "== $name: dim $dim, layers $layers, heads $heads, vocab $vocab, ffn ×4, causal"
  "${edge_env[@]}" "$edge_bench" --export-only --causal --dim "$dim" --layers "$layers" \
    --heads "$heads" --vocab "$vocab" --model "$model" | tee "$logs/$name-export.log"
  # The zero position table must cover every position llama-bench runs.
  context=$((pp + tg > 2048 ? pp + tg : 2048))
  python3 "$here/export_to_gguf.py" "$model" "$work/$name-f16.gguf" --context "$context"
  ggufs=("$work/$name-f16.gguf")
  if [ "$skip_q8" = 0 ]; then
    qdir=$(dirname "$quantize")
    env LD_LIBRARY_PATH="$qdir:$qdir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$quantize" \
      "$work/$name-f16.gguf" "$work/$name-q8_0.gguf" Q8_0 >"$logs/$name-quantize.log" 2>&1 ||
      { echo "llama-quantize failed:"; tail -5 "$logs/$name-quantize.log"; exit 1; }
    ggufs+=("$work/$name-q8_0.gguf")
  fi
  ls -la "$model" "${ggufs[@]}"

  [ -z "$vulkan" ] || run_llama Vulkan "$vulkan" "$name" "${ggufs[@]}"
  [ -z "$cuda" ] || run_llama CUDA "$cuda" "$name" "${ggufs[@]}"

  # fsdpd-edge pp: one sequence of $pp tokens a forward, $pp_windows windows (overlapping by one).
  echo "== $name: fsdpd-edge eval --batch 1 --seq $pp over $pp_windows windows"
  python3 - "$work/$name-tokens.u32" "$vocab" $((pp_windows * pp + 1)) <<'PY'
import sys, numpy as np
path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
np.random.default_rng(1).integers(0, vocab, count, dtype=np.uint32).tofile(path)
PY
  # fp16 weights (the default), then int8 (--weights int8: the linear layers and the head).
  for weights in fp16 int8; do
    flags=() tag=$name-edge
    [ "$weights" = fp16 ] || { flags=(--weights "$weights"); tag=$name-edge-$weights; }
    pp_rate=failed
    if "${edge_env[@]}" "$edge_bin" eval "$model" --tokens "$work/$name-tokens.u32" \
        --token-bytes 4 --batch 1 --seq "$pp" --device "$edge_device" "${flags[@]}" \
        >"$logs/$tag-eval.log" 2>&1; then
      pp_rate=$(sed -n 's/^forward \([0-9.]*\) tokens\/s.*/\1/p' "$logs/$tag-eval.log")
    fi
    grep -E "^backend:|^weights|^forward" "$logs/$tag-eval.log" || tail -5 "$logs/$tag-eval.log"
    # tg: $tg new tokens after an 8-token prompt, through the qkv cache. (The generated text goes
    # to stdout, bytes for a byte-level model; the rates to stderr.)
    # Three runs, each after an untimed one in the same process (llama-bench's warm-up); the
    # table gives their median.
    echo "== $name: fsdpd-edge generate --new-tokens $tg --seq $pp --warmup 1 ${flags[*]} (3 runs)"
    : >"$logs/$tag-generate.log"
    for run in 1 2 3; do
      "${edge_env[@]}" "$edge_bin" generate "$model" --prompt-ids "1 2 3 4 5 6 7 8" \
        --new-tokens "$tg" --seq "$pp" --warmup 1 --device "$edge_device" "${flags[@]}" \
        >"$logs/$tag-generate.out" 2>>"$logs/$tag-generate.log" || true
    done
    tg_rate=$(sed -n 's/^fsdpd-edge: decoding \([0-9.]*\) tokens\/s.*/\1/p' \
      "$logs/$tag-generate.log" | sort -n | awk '{r[NR] = $1} END {print NR == 3 ? r[2] : ""}')
    grep -E "tokens/s" "$logs/$tag-generate.log" || tail -5 "$logs/$tag-generate.log"
    device=$(sed -n "s/^backend: vulkan device [0-9]* '\([^']*\)'.*/\1/p" "$logs/$tag-eval.log")
    printf '%s\tfsdpd-edge Vulkan (MiniLLM)\t%s\t%s\t%s\t%s\n' "$name" "$weights" \
      "${pp_rate:-failed}" "${tg_rate:-failed}" "${device:--}" >>"$results"
  done
done

echo
echo "| shape | engine | weights | pp$pp tok/s | tg$tg tok/s | device |"
echo "|---|---|---|---|---|---|"
while IFS=$'\t' read -r shape engine weights pp_col tg_col device; do
  echo "| $shape | $engine | $weights | $pp_col | $tg_col | $device |"
done <"$results"
echo
echo "Shapes: $(printf '%s ' "${shapes[@]}")(NAME:DIM:LAYERS:HEADS:VOCAB, ffn ×4, causal)."
echo "llama.cpp: llama-bench mean ± sd of $reps runs after a warm-up; pp$pp computes the head on"
echo "the last position only. fsdpd-edge: pp = eval's forward (head and NLL on all $pp positions),"
echo "$((pp_windows - 1)) windows after an untimed one; tg = generate's decoding rate, tokens 2 to $tg after"
echo "an 8-token prompt's prefill and the first token, the median of 3 runs, each after an"
echo "untimed run in its process. Logs: $logs"
