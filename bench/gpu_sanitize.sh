#!/bin/bash
# compute-sanitizer memcheck and racecheck over a small CUDA job: a few steps (3) of a small
# MiniLLM (head_dim 128, the seed's, with the causal mask on), through fsdpd-train on cuda:0, once
# with the default attention (cuDNN where built in) and once with the own tensor-core kernels.
# Run on the GPU machine from the repository root after bench/bundle_for_device.sh
# (bench/device_env.sh sets the environment). A tool's run passes when it reports 0 errors.
# CUDA API errors are left out by default (SANITIZER_API_ERRORS=explicit brings them back):
# NCCL probes cudaFuncGetAttributes on kernels built for other architectures during init and
# handles the error itself, which memcheck would otherwise count as 4 errors.
#   OUT=/tmp/out bench/gpu_sanitize.sh
set -uo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo_root/bench-out}
mkdir -p "$out"
source "$repo_root/bench/device_env.sh" || exit 1
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
work=$(mktemp -d /tmp/fsdpd-sanitize-XXXXXX)
trap 'rm -rf "$work"' EXIT

cat >"$work/small.yaml" <<'YAML'
name: sanitize-small
model: {vocab: 512, dim: 256, layers: 2, heads: 2, ffn_mult: 4, causal: true}
data: {source: synthetic, seq_len: 128}
train: {batch_size: 2, steps: STEPS, lr: 1.0e-3, seed: 0}
parallel: {world_size: 1, device: cuda, param_dtype: bf16, reduce_dtype: fp32}
checkpoint: {every_steps: 0, keep: 1}
YAML
# Racecheck instruments every shared-memory access and is far slower: SANITIZER_STEPS=1 for it.
sed -i "s/steps: STEPS/steps: ${SANITIZER_STEPS:-3}/" "$work/small.yaml"

status=0
for tool in ${SANITIZER_TOOLS:-memcheck racecheck}; do
  # The own attention kernels run under racecheck too (cuDNN's are closed and not ours to fix).
  for kernel in ${SANITIZER_KERNELS:-auto tensor-core}; do
    log=$out/sanitize_${tool}_${kernel}.log
    FSDPD_ATTENTION_KERNEL=$kernel timeout -k 5 "${SANITIZER_LIMIT:-240}" "$sanitizer" \
      --tool "$tool" --report-api-errors "${SANITIZER_API_ERRORS:-no}" --error-exitcode 99 \
      "$bin/fsdpd-train" --spec "$work/small.yaml" \
      --device cuda:0 --checkpoint-dir "$work/checkpoints-$tool-$kernel" >"$log" 2>&1
    code=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -n 1)
    echo "$tool ($kernel attention): exit $code; ${summary:-no summary line}"
    [ "$code" -eq 0 ] || status=1
  done
done
exit "$status"
