#!/bin/bash
# FP8 linear layers (parallel.matmul_dtype fp8) on one GPU, in one call:
#   1. cuda_kernels_test's FP8 and MiniLLM tests (the CUDA FP8 ops against the CPU emulation);
#   2. the seed's shape on a real text (TEXT, at least 1 MB) with fsdpd-train, the worker's
#      engine without the coordinator: STEPS steps (2,000) with matmul_dtype fp8, then bf16,
#      a JSON line a step (loss, tokens/s, peak memory) in $OUT/fp8.jsonl and $OUT/bf16.jsonl;
#   3. the PyTorch anchor compiled (COMPILE=1) on the same shape, for the ratio in this call.
# bench/fp8_curves.py turns the two files into the table and the picture in bench/RESULTS.md.
# Run from the repository root with the binaries in .device/bin and their libraries in
# .device/lib (bench/bundle_for_device.sh):
#   OUT=/tmp/out TEXT=/path/to/text.txt bench/gpu_fp8.sh
# SPEC is the recipe (bench/fp8/seed_text_warmup.yaml, call F3; F2 ran bench/fp8/seed_text.yaml;
# bench/fp8/seed_text_warmup_clip.yaml also clips gradients at 1.0).
# DTYPES="fp8 bf16 bf16-control" adds a bf16 run with CONTROL_ATTENTION (tensor-core) as its
# attention kernel: how far two bf16 runs part on the recipe, beside fp8's distance; "fp8-separate"
# is fp8 with FSDPD_FP8_AMAX=separate (each product measures its operands itself).
# Knobs, for a call short of device time: STEPS (2000), DTYPES ("fp8 bf16"), TEST_FILTER,
# ANCHOR_STEPS (40; 0 skips the anchor), and the time limits TEST_SECONDS (120; 0 skips the tests),
# TRAIN_SECONDS (240 a run) and ANCHOR_SECONDS (150).
set -uo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo_root" || exit 1
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
text=$(realpath "${TEXT:?TEXT must name a text file of at least 1 MB}") || exit 1  # the spec wants an absolute path
steps=${STEPS:-2000}
work=$(mktemp -d /tmp/fsdpd-gpu-fp8-XXXXXX)
trap 'rm -rf "$work"' EXIT
say() { echo "== $(date +%H:%M:%S) $*" | tee -a "$out/gpu_fp8.log"; }

say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "text: $text, $(wc -c <"$text") bytes; recipe ${SPEC:-bench/fp8/seed_text_warmup.yaml}"
if [ "${TEST_SECONDS:-120}" -gt 0 ]; then
  timeout -k 5 "${TEST_SECONDS:-120}" "$bin/cuda_kernels_test" --gtest_color=no \
    --gtest_filter="${TEST_FILTER:-*Fp8*:*MiniLLM*}" >"$out/cuda_kernels_test.log" 2>&1
  say "cuda_kernels_test: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/cuda_kernels_test.log" | tr '\n' ' ')"
fi

for dtype in ${DTYPES:-fp8 bf16}; do
  spec=$work/$dtype.yaml
  # bf16-control: bf16 again with another attention kernel, a perturbation of bf16's own
  # rounding size, to show how far two bf16 runs part on this recipe (bench/fp8_curves.py
  # --control).
  # fp8-separate: fp8 with every linear layer measuring its operands' amax itself
  # (FSDPD_FP8_AMAX=separate), beside fp8's amax from RMSNorm's and SiLU's kernels.
  attention=${FSDPD_ATTENTION_KERNEL:-}
  amax=${FSDPD_FP8_AMAX:-fused}
  [ "$dtype" = bf16-control ] && attention=${CONTROL_ATTENTION:-tensor-core}
  [ "$dtype" = fp8-separate ] && amax=separate
  sed -e "s|path: TEXT|path: $text|" -e "s|matmul_dtype: MATMUL|matmul_dtype: ${dtype%%-*}|" \
    "${SPEC:-$repo_root/bench/fp8/seed_text_warmup.yaml}" >"$spec"
  say "fsdpd-train, $dtype${attention:+ (attention $attention)}, $steps steps"
  FSDPD_ATTENTION_KERNEL=$attention FSDPD_FP8_AMAX=$amax \
  timeout -k 5 "${TRAIN_SECONDS:-240}" "$bin/fsdpd-train" --spec "$spec" --device cuda:0 \
    --steps "$steps" --checkpoint-dir "$work/ckpt-$dtype" --store-dir "$work/store-$dtype" \
    --allowed-root "$(dirname "$text")" --allowed-root "$work" \
    >"$out/$dtype.jsonl" 2>"$out/$dtype.log"
  say "$dtype: exit $? after $(grep -c '"step"' "$out/$dtype.jsonl") steps"
done

if [ "${ANCHOR_STEPS:-40}" -gt 0 ]; then
  say "anchor, compiled"
  COMPILE=1 STEPS=${ANCHOR_STEPS:-40} WARM=10 timeout -k 5 "${ANCHOR_SECONDS:-150}" "$torchrun_bin" \
    --standalone --nproc_per_node=1 "$anchor" >"$out/anchor_compiled.log" 2>&1
  say "anchor: exit $? $(grep RESULT "$out/anchor_compiled.log")"
fi
